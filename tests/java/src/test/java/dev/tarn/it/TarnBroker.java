package dev.tarn.it;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * One {@code tarn serve} process, with the contract of tests/src/lib.rs and
 * tests/python/conftest.py: it listens on 127.0.0.1:0 (HTTP too) with its
 * own data directory; start() waits for the ready line on stdout
 * ({@code tarn: listening on 127.0.0.1:PORT, data in DIR}) and the HTTP line
 * after it; stderr goes to a log file per start, shown when a test fails;
 * stop() sends SIGTERM and requires exit status 0; any "panicked at" in
 * stderr fails the test class.
 */
public final class TarnBroker {
    static final long READY_TIMEOUT_S = 30;
    static final long STOP_TIMEOUT_S = 20;
    static final String READY_PREFIX = "tarn: listening on ";
    static final String READY_DATA_SEP = ", data in ";
    static final String HTTP_PREFIX = "tarn: http on ";
    /** What Rust's panic hook writes to stderr. */
    static final String PANIC_MARKER = "panicked at ";

    private final Path scratch;
    private final Path dataDir;
    private final Map<String, String> settings;
    /** The `listeners` key (a cluster node's fixed ports) instead of --listen 127.0.0.1:0, or null. */
    private final String listeners;
    private Process process;
    private String bootstrap;
    private String http;
    private int starts;

    public TarnBroker(Path scratch, Map<String, String> settings) throws IOException {
        this(scratch, settings, null);
    }

    public TarnBroker(Path scratch, Map<String, String> settings, String listeners) throws IOException {
        this.scratch = scratch;
        this.dataDir = scratch.resolve("data");
        Files.createDirectories(dataDir);
        this.settings = settings;
        this.listeners = listeners;
    }

    /** $TARN_BIN (relative paths from the repository root), else target/debug/tarn. */
    public static Path tarnBin() {
        Path repo = Paths.get(System.getProperty("tarn.repo", "../..")).toAbsolutePath().normalize();
        String env = System.getenv("TARN_BIN");
        Path bin;
        if (env != null && !env.isEmpty()) {
            bin = Paths.get(env);
            if (!bin.isAbsolute() && !Files.exists(bin)) {
                bin = repo.resolve(bin);
            }
        } else {
            bin = repo.resolve("target/debug/tarn");
        }
        if (!Files.isRegularFile(bin)) {
            throw new IllegalStateException("tarn binary not found at " + bin
                    + ": run `cargo build -p tarn-cli` or set TARN_BIN");
        }
        return bin.toAbsolutePath();
    }

    public String bootstrap() {
        return bootstrap;
    }

    public String http() {
        return http;
    }

    Path logPath(int start) {
        return scratch.resolve("broker-" + start + ".stderr.log");
    }

    public void start() throws IOException, InterruptedException {
        if (process != null) {
            throw new IllegalStateException("broker already running");
        }
        starts++;
        List<String> args = new ArrayList<>(List.of(tarnBin().toString(), "serve",
                "--data-dir", dataDir.toString(), "--http-listen", "127.0.0.1:0"));
        if (listeners == null) {
            args.addAll(List.of("--listen", "127.0.0.1:0"));
        } else {
            args.addAll(List.of("--set", "listeners=" + listeners));
        }
        settings.forEach((k, v) -> {
            args.add("--set");
            args.add(k + "=" + v);
        });
        ProcessBuilder builder = new ProcessBuilder(args)
                .redirectInput(ProcessBuilder.Redirect.from(Paths.get("/dev/null").toFile()))
                .redirectError(logPath(starts).toFile());
        process = builder.start();
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Process proc = process;
        Thread pump = new Thread(() -> {
            // Hand over the ready line and the HTTP line, then keep draining
            // so the broker never blocks on a full pipe.
            try (BufferedReader out = new BufferedReader(
                    new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
                for (int i = 0; i < 2; i++) {
                    String line = out.readLine();
                    lines.put(line == null ? "" : line);
                }
                while (out.readLine() != null) {
                    // drain
                }
            } catch (IOException | InterruptedException e) {
                lines.offer("");
            }
        }, "tarn-stdout");
        pump.setDaemon(true);
        pump.start();

        String line = lines.poll(READY_TIMEOUT_S, TimeUnit.SECONDS);
        String addr = parseReadyLine(line);
        if (addr == null) {
            process.destroyForcibly().waitFor();
            String status = String.valueOf(process.exitValue());
            process = null;
            throw new AssertionError("tarn serve gave no ready line within " + READY_TIMEOUT_S
                    + "s (got " + line + ", exit status " + status + ")\n" + logs());
        }
        bootstrap = addr;
        String httpLine = lines.poll(READY_TIMEOUT_S, TimeUnit.SECONDS);
        if (httpLine == null || !httpLine.startsWith(HTTP_PREFIX)) {
            process.destroyForcibly().waitFor();
            process = null;
            throw new AssertionError("tarn serve printed no HTTP line after the ready line (got "
                    + httpLine + ")\n" + logs());
        }
        http = httpLine.substring(HTTP_PREFIX.length()).trim();
    }

    /** host:port from the ready line, or null when it is not one. */
    static String parseReadyLine(String line) {
        if (line == null || !line.startsWith(READY_PREFIX) || !line.contains(READY_DATA_SEP)) {
            return null;
        }
        String addr = line.substring(READY_PREFIX.length(), line.indexOf(READY_DATA_SEP));
        String port = addr.substring(addr.lastIndexOf(':') + 1);
        if (!port.matches("[0-9]+") || Integer.parseInt(port) == 0) {
            return null;
        }
        return addr;
    }

    /** SIGTERM, wait, and require a clean exit (status 0). */
    public void stop() throws InterruptedException {
        Process proc = process;
        process = null;
        proc.destroy(); // SIGTERM on Unix
        if (!proc.waitFor(STOP_TIMEOUT_S, TimeUnit.SECONDS)) {
            proc.destroyForcibly().waitFor();
            throw new AssertionError("broker did not exit within " + STOP_TIMEOUT_S
                    + "s of SIGTERM\n" + logs());
        }
        if (proc.exitValue() != 0) {
            throw new AssertionError("broker exited with " + proc.exitValue()
                    + " after SIGTERM\n" + logs());
        }
    }

    public void restart() throws IOException, InterruptedException {
        stop();
        start();
    }

    public boolean running() {
        return process != null;
    }

    public void assertAlive() {
        if (process != null && !process.isAlive()) {
            int status = process.exitValue();
            process = null;
            throw new AssertionError("broker exited unexpectedly with status " + status + "\n" + logs());
        }
    }

    /** Kills the process without checking anything (cleanup after a failure). */
    void kill() throws InterruptedException {
        if (process != null) {
            process.destroyForcibly().waitFor();
            process = null;
        }
    }

    /** Lines of any start's stderr that report a Rust panic. */
    public List<String> panics() {
        List<String> found = new ArrayList<>();
        for (int start = 1; start <= starts; start++) {
            for (String line : readLines(logPath(start))) {
                if (line.contains(PANIC_MARKER)) {
                    found.add(line);
                }
            }
        }
        return found;
    }

    /** The last lines of each start's stderr. */
    public String logs() {
        StringBuilder out = new StringBuilder();
        for (int start = 1; start <= starts; start++) {
            List<String> all = readLines(logPath(start));
            List<String> tail = all.subList(Math.max(0, all.size() - 200), all.size());
            out.append("----- tarn stderr, start #").append(start)
                    .append(" (last ").append(tail.size()).append(" lines) -----\n");
            tail.forEach(l -> out.append(l).append('\n'));
        }
        return out.toString();
    }

    private static List<String> readLines(Path path) {
        try {
            return Files.exists(path) ? Files.readAllLines(path, StandardCharsets.ISO_8859_1) : List.of();
        } catch (IOException e) {
            throw new AssertionError("read " + path, e);
        }
    }
}
