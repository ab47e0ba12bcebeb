//! `tarn perf produce` and `tarn perf consume` against the real broker:
//! Kafka's flags, Kafka's output lines, the records really arrive (checked
//! with librdkafka's watermarks), and a consumer that cannot get the
//! messages it was asked for exits non-zero.

use tarn_e2e::kafka;
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};

const RECORDS: u64 = 20_000;

#[test]
fn produce_then_consume_with_kafkas_flags_and_output() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic("perf", 3);
        let bootstrap = format!("bootstrap.servers={}", broker.bootstrap());
        let records = RECORDS.to_string();
        let out = broker.cli(&[
            "perf",
            "produce",
            "--topic",
            "perf",
            "--num-records",
            &records,
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &bootstrap,
            "acks=1",
            "batch.size=16384",
            "linger.ms=5",
            "compression.type=zstd",
        ]);
        assert!(out.status.success(), "perf produce: {out}");
        let last = out.stdout.lines().last().unwrap_or_default().to_owned();
        // "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms
        // max latency, P ms 50th, P ms 95th, P ms 99th, P ms 99.9th."
        assert!(
            last.starts_with(&format!("{RECORDS} records sent, "))
                && last.contains(" records/sec (")
                && last.contains(" MB/sec), ")
                && last.contains(" ms avg latency, ")
                && last.contains(" ms max latency, ")
                && last.ends_with(" ms 99.9th."),
            "final line: {last}"
        );
        let total: i64 = kafka::watermarks(broker.bootstrap(), "perf")
            .iter()
            .map(|(_, low, high)| high - low)
            .sum();
        assert_eq!(total, RECORDS as i64);

        let out = broker.cli(&[
            "perf",
            "consume",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "perf",
            "--messages",
            &records,
        ]);
        assert!(out.status.success(), "perf consume: {out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            lines[0],
            "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, \
             nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
        );
        let fields: Vec<&str> = lines[1].split(", ").collect();
        assert_eq!(fields.len(), 10, "{}", lines[1]);
        assert_eq!(fields[4], records, "messages consumed: {}", lines[1]);
        let mb: f64 = fields[2].parse().unwrap();
        let expected_mb = (RECORDS * 100) as f64 / (1024.0 * 1024.0);
        assert!(
            (mb - expected_mb).abs() < 0.001,
            "{mb} MB, expected {expected_mb}"
        );

        // Asking for more than there is: a warning and a failing exit.
        let more = (RECORDS + 1).to_string();
        let out = broker.cli(&[
            "perf",
            "consume",
            "--bootstrap-server",
            broker.bootstrap(),
            "--topic",
            "perf",
            "--messages",
            &more,
            "--timeout",
            "1000",
        ]);
        assert!(!out.status.success(), "{out}");
        assert!(out.stderr.contains("timeout (1000 ms) exceeded"), "{out}");

        // An unsupported producer property is refused, not ignored.
        let out = broker.cli(&[
            "perf",
            "produce",
            "--topic",
            "perf",
            "--num-records",
            "1",
            "--record-size",
            "1",
            "--throughput",
            "-1",
            "--producer-props",
            &bootstrap,
            "buffer.memory=1",
        ]);
        assert!(!out.status.success(), "{out}");
        assert!(out.stderr.contains("buffer.memory"), "{out}");
    });
}
