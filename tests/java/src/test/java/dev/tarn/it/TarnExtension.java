package dev.tarn.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;
import org.junit.jupiter.api.extension.TestWatcher;

/**
 * One broker per test class: started before the first test, stopped with
 * SIGTERM (exit 0 required) after the last, and the class fails if the
 * broker's stderr holds a panic. A failing test prints the broker's stderr.
 * Tests get the broker as a {@link TarnBroker} parameter; broker settings
 * ({@code --set key=value}) come from {@link TarnSettings} on the class.
 */
public final class TarnExtension implements BeforeAllCallback, AfterAllCallback, ParameterResolver, TestWatcher {
    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(TarnExtension.class);

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        // The suite runs once per client line: make sure this is the one asked for.
        String expected = System.getProperty("tarn.expected.kafka.version");
        String actual = clientVersion();
        if (expected != null && !expected.equals(actual)) {
            throw new AssertionError("kafka-clients " + actual + " on the classpath, expected " + expected);
        }
        Map<String, String> settings = new HashMap<>();
        TarnSettings annotation = context.getRequiredTestClass().getAnnotation(TarnSettings.class);
        if (annotation != null) {
            for (String kv : annotation.value()) {
                int eq = kv.indexOf('=');
                settings.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
        Path scratch = Files.createTempDirectory("tarn-java-" + context.getRequiredTestClass().getSimpleName());
        TarnBroker broker = new TarnBroker(scratch, settings);
        context.getStore(NS).put("broker", broker);
        broker.start();
    }

    @Override
    public void afterAll(ExtensionContext context) throws Exception {
        TarnBroker broker = context.getStore(NS).get("broker", TarnBroker.class);
        if (broker == null) {
            return;
        }
        try {
            if (broker.running()) {
                broker.assertAlive();
                broker.stop();
            }
        } finally {
            broker.kill();
        }
        List<String> panics = broker.panics();
        if (!panics.isEmpty()) {
            throw new AssertionError("the broker panicked: " + panics + "\n" + broker.logs());
        }
    }

    /** The kafka-clients version on the classpath, from the jar's own properties. */
    static String clientVersion() throws java.io.IOException {
        try (java.io.InputStream in = org.apache.kafka.clients.producer.KafkaProducer.class
                .getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in == null) {
                throw new AssertionError("kafka-clients has no kafka/kafka-version.properties");
            }
            java.util.Properties props = new java.util.Properties();
            props.load(in);
            return props.getProperty("version");
        }
    }

    static TarnBroker broker(ExtensionContext context) {
        ExtensionContext classContext = context;
        while (classContext.getTestMethod().isPresent() && classContext.getParent().isPresent()) {
            classContext = classContext.getParent().get();
        }
        return classContext.getStore(NS).get("broker", TarnBroker.class);
    }

    @Override
    public boolean supportsParameter(ParameterContext p, ExtensionContext e) {
        return p.getParameter().getType() == TarnBroker.class;
    }

    @Override
    public Object resolveParameter(ParameterContext p, ExtensionContext e) {
        return broker(e);
    }

    @Override
    public void testFailed(ExtensionContext context, Throwable cause) {
        TarnBroker broker = broker(context);
        if (broker != null) {
            System.err.println("test " + context.getDisplayName() + " failed; broker stderr:\n" + broker.logs());
        }
    }

    @Override
    public void testAborted(ExtensionContext context, Throwable cause) {
        testFailed(context, cause);
    }

    @Override
    public void testDisabled(ExtensionContext context, Optional<String> reason) {
    }
}
