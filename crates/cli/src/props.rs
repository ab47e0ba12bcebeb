//! Kafka-style settings for the CLI's clients: `key=value` arguments parsed
//! as Kafka's tools parse `--property` and `--producer-property`, Java
//! properties files (`--producer.config`, `--reader-config`, ...), and the
//! producer settings the perf and console producers share. A setting a
//! tool does not honour is refused by name, never silently ignored.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use tarn_protocol::record_batch::Compression;

/// The largest properties file the CLI reads.
const PROPERTIES_FILE_MAX_BYTES: u64 = 1 << 20;

/// Settings in the order given; when a key repeats, the last one wins.
pub type Settings = Vec<(String, String)>;

/// The value of `key` in `settings`, the last one given.
pub fn lookup<'a>(settings: &'a [(String, String)], key: &str) -> Option<&'a str> {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `key=value` arguments as Kafka's `CommandLineUtils.parseKeyValueArgs`
/// reads them: split at the first `=`, nothing trimmed, a missing value is
/// the empty string.
pub fn parse_key_value_args(args: &[String]) -> Settings {
    args.iter()
        .map(|arg| match arg.split_once('=') {
            Some((key, value)) => (key.to_owned(), value.to_owned()),
            None => (arg.clone(), String::new()),
        })
        .collect()
}

/// Reads a Java properties file of at most `PROPERTIES_FILE_MAX_BYTES`,
/// parsed as Java parses it (`tarn_config::properties::parse`).
pub fn load_properties(path: &Path) -> Result<Settings> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("read {}", path.display()))?
        .len();
    if size > PROPERTIES_FILE_MAX_BYTES {
        bail!(
            "{} is {size} bytes; a properties file may hold at most {PROPERTIES_FILE_MAX_BYTES}",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(tarn_config::properties::parse(&text))
}

/// A producer's settings, by Kafka's producer config names.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// `bootstrap.servers`
    pub bootstrap: String,
    /// `acks`: -1 (all), 0 or 1.
    pub acks: i16,
    /// `batch.size`, bytes.
    pub batch_size: usize,
    /// `linger.ms`
    pub linger: Duration,
    /// `compression.type`
    pub codec: Compression,
    /// `max.in.flight.requests.per.connection`
    pub max_in_flight: usize,
    /// `client.id`
    pub client_id: String,
    /// `request.timeout.ms`, also sent as the produce request's timeout.
    pub request_timeout_ms: i32,
    /// `retries`: how often a batch refused with a retriable error is sent again.
    pub retries: u32,
    /// `retry.backoff.ms`
    pub retry_backoff: Duration,
    /// `max.block.ms`: how long to wait for a topic's metadata.
    pub max_block: Duration,
    /// `max.request.size`: the largest record the producer accepts, bytes.
    pub max_request_size: usize,
}

impl Default for ProducerConfig {
    /// Kafka's producer defaults.
    fn default() -> Self {
        ProducerConfig {
            bootstrap: String::new(),
            acks: -1,
            batch_size: 16_384,
            linger: Duration::from_millis(5),
            codec: Compression::None,
            max_in_flight: 5,
            client_id: String::new(),
            request_timeout_ms: 30_000,
            retries: i32::MAX as u32,
            retry_backoff: Duration::from_millis(100),
            max_block: Duration::from_secs(60),
            max_request_size: 1 << 20,
        }
    }
}

/// The most bytes `batch.size` and `max.request.size` may be set to.
const PRODUCER_BYTES_MAX: u64 = 64 << 20;

/// Kafka's name of a compression codec, as `compression.type` spells it.
pub fn parse_codec(name: &str) -> Result<Compression> {
    Ok(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => bail!("compression.type {other} is not one of none, gzip, snappy, lz4, zstd"),
    })
}

/// Kafka's `acks` values.
pub fn parse_acks(value: &str) -> Result<i16> {
    Ok(match value.trim() {
        "all" | "-1" => -1,
        "0" => 0,
        "1" => 1,
        _ => bail!("acks={value}: use all, -1, 0 or 1"),
    })
}

impl ProducerConfig {
    /// Applies `settings` in order. A key outside `supported` is refused,
    /// naming `tool` and what it does support.
    pub fn apply(
        &mut self,
        settings: &[(String, String)],
        supported: &[&str],
        tool: &str,
    ) -> Result<()> {
        for (key, value) in settings {
            if !supported.contains(&key.as_str()) {
                bail!(
                    "producer property {key} is not supported by {tool} (supported: {})",
                    supported.join(", ")
                );
            }
            self.set(key, value)?;
        }
        Ok(())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let number = || -> Result<u64> {
            value
                .trim()
                .parse()
                .with_context(|| format!("{key}={value}: not a non-negative number"))
        };
        let bytes = || -> Result<usize> {
            match number()? {
                n @ 1..=PRODUCER_BYTES_MAX => Ok(n as usize),
                _ => bail!("{key}={value}: must be between 1 and {PRODUCER_BYTES_MAX}"),
            }
        };
        match key {
            "bootstrap.servers" => self.bootstrap = value.to_owned(),
            "acks" => self.acks = parse_acks(value)?,
            "batch.size" => self.batch_size = bytes()?,
            "linger.ms" => self.linger = Duration::from_millis(number()?),
            "compression.type" => self.codec = parse_codec(value.trim())?,
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight = (number()? as usize).clamp(1, 1000)
            }
            "client.id" => self.client_id = value.to_owned(),
            "request.timeout.ms" => match number()? {
                n @ 1..=0x7fff_ffff => self.request_timeout_ms = n as i32,
                _ => bail!("{key}={value}: must be between 1 and {}", i32::MAX),
            },
            "retries" => self.retries = u32::try_from(number()?).unwrap_or(u32::MAX),
            "retry.backoff.ms" => self.retry_backoff = Duration::from_millis(number()?),
            "max.block.ms" => self.max_block = Duration::from_millis(number()?),
            "max.request.size" => self.max_request_size = bytes()?,
            _ => bail!("producer property {key} is not known"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Settings {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn key_value_args_split_at_the_first_equals_sign() {
        let args = ["a=b=c", "key.separator=", "flag", "sep= "].map(String::from);
        assert_eq!(
            parse_key_value_args(&args),
            pairs(&[
                ("a", "b=c"),
                ("key.separator", ""),
                ("flag", ""),
                ("sep", " ")
            ])
        );
    }

    #[test]
    fn producer_settings_are_checked() {
        let supported = ["acks", "linger.ms", "batch.size", "compression.type"];
        let mut config = ProducerConfig::default();
        config
            .apply(
                &pairs(&[
                    ("acks", "1"),
                    ("linger.ms", "7"),
                    ("compression.type", "lz4"),
                ]),
                &supported,
                "test",
            )
            .unwrap();
        assert_eq!(
            (config.acks, config.linger, config.codec),
            (1, Duration::from_millis(7), Compression::Lz4)
        );
        let refused = config
            .apply(&pairs(&[("buffer.memory", "1")]), &supported, "tarn test")
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("buffer.memory is not supported by tarn test"),
            "{refused}"
        );
        for bad in [("acks", "2"), ("batch.size", "0"), ("linger.ms", "-1")] {
            assert!(
                config.apply(&pairs(&[bad]), &supported, "t").is_err(),
                "{bad:?}"
            );
        }
    }
}
