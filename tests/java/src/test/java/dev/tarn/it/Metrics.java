package dev.tarn.it;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** Reads values from the broker's /metrics. */
public final class Metrics {
    private Metrics() {
    }

    public static double value(TarnBroker broker, String name) {
        for (String line : scrape(broker).split("\n")) {
            if (line.startsWith(name + " ")) {
                return Double.parseDouble(line.substring(name.length() + 1).trim());
            }
        }
        throw new AssertionError("no " + name + " in /metrics");
    }

    /** The sum of `name` over the series whose labels contain `label` (e.g. api="Fetch"). */
    public static double sum(TarnBroker broker, String name, String label) {
        double total = 0;
        for (String line : scrape(broker).split("\n")) {
            if (line.startsWith(name + "{") && line.contains(label)) {
                total += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1).trim());
            }
        }
        return total;
    }

    static String scrape(TarnBroker broker) {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://" + broker.http() + "/metrics"))
                .timeout(Duration.ofSeconds(10)).build();
        try {
            HttpResponse<String> response = HttpClient.newHttpClient()
                    .send(request, HttpResponse.BodyHandlers.ofString());
            if (response.statusCode() != 200) {
                throw new AssertionError("/metrics answered " + response.statusCode());
            }
            return response.body();
        } catch (IOException | InterruptedException e) {
            throw new AssertionError("GET /metrics", e);
        }
    }
}
