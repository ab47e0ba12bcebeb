// Package tarntest drives a real `tarn serve` with Go's two Kafka clients:
// franz-go (kgo and kadm, franz_test.go) and sarama (sarama_test.go).
//
// Each test starts its own broker (startBroker) on 127.0.0.1:0 with its HTTP
// listener on another free port and a fresh data directory, and waits for
// the ready line on stdout (`tarn: listening on 127.0.0.1:PORT, data in DIR`)
// and the HTTP line after it (`tarn: http on 127.0.0.1:PORT`). The broker's
// stderr goes to a log file that is logged when the test ends (go test shows
// it when the test fails). At the end the broker is sent SIGTERM and must
// exit 0, and the test fails if its stderr holds a Rust panic. The binary is
// $TARN_BIN (a relative path that does not exist from here is taken from the
// repository root), default <repo>/target/debug/tarn. The failover tests
// (cluster_test.go) start three such brokers as one cluster instead
// (cluster_harness_test.go).
//
// Waits are on observable conditions with generous deadlines, never on the
// wall clock.
package tarntest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// readyTimeout is how long a broker may take to print its ready lines.
	readyTimeout = 30 * time.Second
	// stopTimeout is how long a broker may take to exit after SIGTERM.
	stopTimeout = 20 * time.Second
	// waitTimeout bounds every wait for a condition a client should reach
	// (a group settling, records arriving): generous, as machines are noisy.
	waitTimeout = 60 * time.Second
	// pollInterval is how often a wait re-checks its condition.
	pollInterval = 50 * time.Millisecond

	readyPrefix  = "tarn: listening on "
	readyDataSep = ", data in "
	httpPrefix   = "tarn: http on "
	// panicMarker is what Rust's panic hook writes to stderr (`thread 'x'
	// panicked at src/...`): a test whose broker logged it fails, whatever
	// the clients saw.
	panicMarker = "panicked at "
	// logTailLines is how much of the broker's stderr a test logs.
	logTailLines = 200
)

// repoRoot is the repository root: go test runs in tests/go.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("resolve repository root: %v", err)
	}
	return root
}

// tarnBin is where the tarn binary is (see the package comment).
func tarnBin(t *testing.T) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "target", "debug", "tarn")
	if env := os.Getenv("TARN_BIN"); env != "" {
		path = env
		if _, err := os.Stat(path); !filepath.IsAbs(path) && err != nil {
			path = filepath.Join(repoRoot(t), env)
		}
	}
	info, err := os.Stat(path)
	if err != nil || !info.Mode().IsRegular() {
		t.Fatalf("tarn binary not found at %s (%v): build it first (`cargo build -p tarn-cli`) or set TARN_BIN", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("resolve %s: %v", path, err)
	}
	return abs
}

// broker is one running `tarn serve`.
type broker struct {
	// name is what its logs are headed with: "tarn", or "node N" in a
	// cluster.
	name      string
	bootstrap string // host:port for clients
	http      string // host:port of /metrics, /health and the console
	dataDir   string
	logPath   string
	cmd       *exec.Cmd
	// exited is closed once the process has exited; waitErr is Wait's answer.
	exited  chan struct{}
	waitErr error
	// drained receives the stdout pump's result once stdout reaches EOF.
	drained chan error
	// ended is set once the test has ended the broker on purpose (SIGTERM
	// or SIGKILL), so that stop does not take its exit for a crash.
	ended bool
}

// startBroker starts a broker with `--set key=value` for each pair in
// settings, and registers its clean stop (SIGTERM, exit 0, no panic) with
// t.Cleanup. Register client cleanups after this call so that they run
// first.
func startBroker(t *testing.T, settings ...string) *broker {
	t.Helper()
	return startTarn(t, "tarn", t.TempDir(), []string{"--listen", "127.0.0.1:0"}, settings...)
}

// startTarn is startBroker with the broker's name, scratch directory and
// listener arguments given: a cluster node has fixed ports in its
// `listeners` key, which does not combine with --listen.
func startTarn(t *testing.T, name, scratch string, listen []string, settings ...string) *broker {
	t.Helper()
	if len(settings)%2 != 0 {
		t.Fatalf("startBroker settings must be key, value pairs: %q", settings)
	}
	b := &broker{
		name:    name,
		dataDir: filepath.Join(scratch, "data"),
		logPath: filepath.Join(scratch, "broker.stderr.log"),
		exited:  make(chan struct{}),
		drained: make(chan error, 1),
	}
	if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		t.Fatalf("create data dir: %v", err)
	}
	args := append([]string{"serve", "--data-dir", b.dataDir, "--http-listen", "127.0.0.1:0"}, listen...)
	for i := 0; i < len(settings); i += 2 {
		args = append(args, "--set", settings[i]+"="+settings[i+1])
	}
	stderr, err := os.Create(b.logPath)
	if err != nil {
		t.Fatalf("create broker log: %v", err)
	}
	defer closeOrFail(t, stderr, "broker log (parent's copy)")
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatalf("create stdout pipe: %v", err)
	}
	b.cmd = exec.Command(tarnBin(t), args...)
	b.cmd.Stdout = stdoutW
	b.cmd.Stderr = stderr
	// If this test process dies, so does the broker.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", b.cmd.Path, err)
	}
	// The child holds its own copy of the write end: closing ours lets the
	// reader see EOF when the broker exits.
	closeOrFail(t, stdoutW, "stdout pipe (parent's write end)")
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() { b.stop(t) })

	lines := make(chan string, 2)
	go func() { b.drained <- pumpStdout(stdoutR, lines) }()
	ready := b.nextLine(t, lines)
	addr, dir, ok := parseReadyLine(ready)
	if !ok {
		t.Fatalf("tarn serve printed %q instead of its ready line\n%s", ready, b.logs())
	}
	if dir != b.dataDir {
		t.Fatalf("ready line names data dir %q, want %q", dir, b.dataDir)
	}
	b.bootstrap = addr
	httpLine := b.nextLine(t, lines)
	if !strings.HasPrefix(httpLine, httpPrefix) {
		t.Fatalf("tarn serve printed %q instead of its HTTP line\n%s", httpLine, b.logs())
	}
	b.http = strings.TrimPrefix(httpLine, httpPrefix)
	return b
}

// pumpStdout hands over the broker's first two stdout lines, then drains the
// rest so the broker never blocks on a full pipe. It closes lines when it has
// no more to hand over (early if the broker exited before printing both).
func pumpStdout(r *os.File, lines chan<- string) error {
	reader := bufio.NewReader(r)
	for range 2 {
		line, err := reader.ReadString('\n')
		if err != nil {
			close(lines)
			return errors.Join(readErr(err), r.Close())
		}
		lines <- strings.TrimRight(line, "\n")
	}
	close(lines)
	_, err := io.Copy(io.Discard, reader)
	return errors.Join(err, r.Close())
}

// readErr is nil for EOF (nextLine reports a broker that exited early with
// its status), else the read error.
func readErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("read broker stdout: %w", err)
}

// nextLine waits for the next stdout line, failing the test if the broker
// exits or stays silent.
func (b *broker) nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case line, ok := <-lines:
		if !ok {
			<-b.exited
			t.Fatalf("tarn serve exited (%v) before printing its ready lines\n%s", b.waitErr, b.logs())
		}
		return line
	case <-time.After(readyTimeout):
		t.Fatalf("tarn serve printed no ready line within %v\n%s", readyTimeout, b.logs())
	}
	return ""
}

// parseReadyLine returns host:port and the data dir from the ready line.
func parseReadyLine(line string) (addr, dataDir string, ok bool) {
	rest, found := strings.CutPrefix(line, readyPrefix)
	if !found {
		return "", "", false
	}
	addr, dataDir, found = strings.Cut(rest, readyDataSep)
	if !found {
		return "", "", false
	}
	_, port, found := strings.Cut(addr, ":")
	if !found || port == "" || port == "0" {
		return "", "", false
	}
	return addr, dataDir, true
}

// stop sends SIGTERM, requires exit status 0 within stopTimeout, fails the
// test on a logged panic, and logs the broker's stderr.
func (b *broker) stop(t *testing.T) {
	t.Helper()
	defer func() { t.Logf("%s", b.logs()) }()
	select {
	case <-b.exited:
		if !b.ended {
			t.Errorf("%s exited before the test ended: %v", b.name, b.waitErr)
		}
	default:
		b.terminate(t)
	}
	select {
	case err := <-b.drained:
		if err != nil {
			t.Errorf("%s stdout: %v", b.name, err)
		}
	case <-time.After(stopTimeout):
		t.Errorf("%s stdout still open %v after it exited", b.name, stopTimeout)
	}
	if panics := b.panics(t); len(panics) > 0 {
		t.Errorf("%s panicked:\n%s", b.name, strings.Join(panics, "\n"))
	}
}

// terminate sends SIGTERM and requires exit status 0 within stopTimeout
// (after which the broker is killed).
func (b *broker) terminate(t *testing.T) {
	t.Helper()
	b.ended = true
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("send SIGTERM to %s: %v", b.name, err)
	}
	select {
	case <-b.exited:
		if b.waitErr != nil {
			t.Errorf("%s exited with %v after SIGTERM, want status 0", b.name, b.waitErr)
		}
	case <-time.After(stopTimeout):
		if err := b.cmd.Process.Kill(); err != nil {
			t.Errorf("kill %s: %v", b.name, err)
		}
		<-b.exited
		t.Errorf("%s did not exit within %v of SIGTERM", b.name, stopTimeout)
	}
}

// hasExited reports whether the broker process has exited, for whatever
// reason.
func (b *broker) hasExited() bool {
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL, as a crash would, and waits until the broker has
// exited; stop then only checks its logs.
func (b *broker) kill(t *testing.T) {
	t.Helper()
	b.ended = true
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatalf("send SIGKILL to %s: %v", b.name, err)
	}
	<-b.exited
}

func (b *broker) readLog() (string, error) {
	text, err := os.ReadFile(b.logPath)
	if err != nil {
		return "", fmt.Errorf("read broker log %s: %w", b.logPath, err)
	}
	return string(text), nil
}

// logs is the last logTailLines lines of the broker's stderr.
func (b *broker) logs() string {
	text, err := b.readLog()
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return fmt.Sprintf("----- %s stderr (last %d lines) -----\n%s", b.name, len(lines), strings.Join(lines, "\n"))
}

// panics returns the lines of the broker's stderr that report a panic.
func (b *broker) panics(t *testing.T) []string {
	t.Helper()
	text, err := b.readLog()
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	var found []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, panicMarker) {
			found = append(found, line)
		}
	}
	return found
}

// dumpLog runs `tarn dump-log` on a partition's first segment and returns
// its output (one line per batch, as kafka-dump-log.sh prints them).
func (b *broker) dumpLog(t *testing.T, topic string, partition int32) string {
	t.Helper()
	segment := filepath.Join(b.dataDir, fmt.Sprintf("%s-%d", topic, partition), "00000000000000000000.log")
	out, err := exec.Command(tarnBin(t), "dump-log", segment).CombinedOutput()
	if err != nil {
		t.Fatalf("tarn dump-log %s: %v\n%s", segment, err, out)
	}
	return string(out)
}

// waitFor polls check until it reports done, failing the test after
// waitTimeout with what was awaited and check's last account of the state.
func waitFor(t *testing.T, what string, check func() (done bool, state string)) {
	t.Helper()
	waitEvery(t, what, pollInterval, check)
}

// waitEvery is waitFor re-checking every interval, for a check that costs
// more than a look at local state (a new connection to each broker).
func waitEvery(t *testing.T, what string, interval time.Duration, check func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		done, state := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", waitTimeout, what, state)
		}
		time.Sleep(interval)
	}
}

func closeOrFail(t *testing.T, c io.Closer, what string) {
	t.Helper()
	if err := c.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Errorf("close %s: %v", what, err)
	}
}
