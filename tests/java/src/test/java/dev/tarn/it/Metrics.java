package dev.tarn.it;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** Reads one unlabelled value from the broker's /metrics. */
public final class Metrics {
    private Metrics() {
    }

    public static double value(TarnBroker broker, String name) {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://" + broker.http() + "/metrics"))
                .timeout(Duration.ofSeconds(10)).build();
        String body;
        try {
            HttpResponse<String> response = HttpClient.newHttpClient()
                    .send(request, HttpResponse.BodyHandlers.ofString());
            if (response.statusCode() != 200) {
                throw new AssertionError("/metrics answered " + response.statusCode());
            }
            body = response.body();
        } catch (IOException | InterruptedException e) {
            throw new AssertionError("GET /metrics", e);
        }
        for (String line : body.split("\n")) {
            if (line.startsWith(name + " ")) {
                return Double.parseDouble(line.substring(name.length() + 1).trim());
            }
        }
        throw new AssertionError("no " + name + " in /metrics");
    }
}
