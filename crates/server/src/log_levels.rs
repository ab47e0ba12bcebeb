//! Log levels changed while the broker runs: Kafka's BROKER_LOGGER
//! resource (KIP-412). DescribeConfigs lists every logger with its level,
//! IncrementalAlterConfigs sets or unsets one. Tarn's loggers are the
//! targets its log lines carry (`tarn_server`, `tarn_server::handlers`,
//! `openraft`, ...) and `root`, the level of every target no other logger
//! covers; a logger covers the targets under it (`tarn_server` covers
//! `tarn_server::handlers::produce`). As in Kafka, a level lasts until
//! the process exits.
//!
//! Logging is the process's, so these levels are too: the `tarn` binary
//! hands [`install`] its start-up filter and a way to replace the filter;
//! without that (brokers inside a test process) levels are kept and
//! described but change nothing.

use std::collections::BTreeMap;
use std::sync::{LazyLock, OnceLock};

use parking_lot::Mutex;
use tarn_metadata::dynamic_config::{check_node_id, AdminError, ConfigSource};
use tarn_protocol::error;
use tarn_protocol::messages::describe_configs::DescribeConfigsResourceResult;
use tarn_protocol::messages::incremental_alter_configs::{
    IncrementalAlterableConfig, OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT,
};

/// The logger every target falls back to.
pub const ROOT: &str = "root";

/// Kafka's level names (`LogLevelConfig.VALID_LOG_LEVELS`), most severe
/// first. FATAL logs what ERROR does: Tarn has no level above ERROR.
pub const LEVELS: [&str; 6] = ["FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"];

/// Loggers listed even when no directive names them: the crates that log.
const CRATES: &[&str] = &[
    "openraft",
    "tarn_cli",
    "tarn_client",
    "tarn_config",
    "tarn_coordinator",
    "tarn_metadata",
    "tarn_protocol",
    "tarn_quorum",
    "tarn_replication",
    "tarn_server",
    "tarn_storage",
];

/// Replaces the process's log filter with the directives given.
type Apply = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

pub struct LogLevels {
    state: Mutex<State>,
    apply: OnceLock<Apply>,
}

#[derive(Debug, Clone, PartialEq)]
struct State {
    /// Level names by logger; `root` is always there.
    levels: BTreeMap<String, String>,
    /// Directives of the start-up filter that select spans or fields,
    /// kept as given after the loggers' own.
    other: Vec<String>,
}

static LOG_LEVELS: LazyLock<LogLevels> = LazyLock::new(|| LogLevels {
    state: Mutex::new(State::parse("info")),
    apply: OnceLock::new(),
});

/// This process's log levels.
pub fn log_levels() -> &'static LogLevels {
    &LOG_LEVELS
}

/// Starts from `filter` (the directives the process's log filter was made
/// of) and changes levels through `apply` from now on; once per process.
pub fn install(
    filter: &str,
    apply: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
) -> Result<(), String> {
    let levels = log_levels();
    levels
        .apply
        .set(Box::new(apply))
        .map_err(|_| "the log levels were installed before".to_owned())?;
    *levels.state.lock() = State::parse(filter);
    Ok(())
}

fn invalid_request(message: String) -> AdminError {
    AdminError {
        code: error::INVALID_REQUEST,
        message: Some(message),
    }
}

fn invalid_config(message: String) -> AdminError {
    AdminError {
        code: error::INVALID_CONFIG,
        message: Some(message),
    }
}

/// DescribeConfigs of the BROKER_LOGGER resource `name`: every logger
/// (those of `keys` when given) with its level, as Kafka lists them.
pub fn describe(
    name: &str,
    node_id: i32,
    keys: Option<&[String]>,
) -> Result<Vec<DescribeConfigsResourceResult>, AdminError> {
    if name.is_empty() {
        return Err(invalid_request("Broker id must not be empty".into()));
    }
    check_node_id(name, node_id, "Broker", &node_id.to_string())?;
    Ok(log_levels()
        .loggers()
        .into_iter()
        .filter(|(logger, _)| keys.is_none_or(|keys| keys.contains(logger)))
        .map(|(logger, level)| DescribeConfigsResourceResult {
            name: logger,
            value: Some(level),
            read_only: false,
            is_default: false,
            config_source: ConfigSource::DynamicBrokerLogger.id(),
            is_sensitive: false,
            synonyms: Vec::new(),
            config_type: 0,
            // Kafka's field default, whether documentation was asked for
            // or not: it documents no logger.
            documentation: Some(String::new()),
        })
        .collect())
}

/// IncrementalAlterConfigs of the BROKER_LOGGER resource `name`: each
/// operation checked as Kafka does (SET a known logger to one of
/// [`LEVELS`], DELETE a known logger but root; no APPEND or SUBTRACT),
/// then all applied at once unless `validate_only`.
pub fn alter(
    name: &str,
    node_id: i32,
    configs: &[IncrementalAlterableConfig],
    validate_only: bool,
) -> Result<(), AdminError> {
    let nulls: Vec<&str> = configs
        .iter()
        .filter(|c| c.config_operation != OP_DELETE && c.value.is_none())
        .map(|c| c.name.as_str())
        .collect();
    if !nulls.is_empty() {
        return Err(invalid_request(format!(
            "Null value not supported for : {}",
            nulls.join(", ")
        )));
    }
    check_node_id(name, node_id, "Node", &format!("{node_id},"))?;
    let levels = log_levels();
    let mut changes = Vec::with_capacity(configs.len());
    for config in configs {
        let logger = config.name.as_str();
        let exists = || {
            if levels.exists(logger) {
                Ok(())
            } else {
                Err(invalid_config(format!("Logger {logger} does not exist!")))
            }
        };
        match config.config_operation {
            OP_SET => {
                exists()?;
                let level = config.value.as_deref().unwrap_or_default();
                if !LEVELS.contains(&level) {
                    return Err(invalid_config(format!(
                        "Cannot set the log level of {logger} to {level} as it is not a \
                         supported log level. Valid log levels are {}",
                        LEVELS.join(", ")
                    )));
                }
                changes.push((logger, Some(level)));
            }
            OP_DELETE => {
                exists()?;
                if logger == ROOT {
                    return Err(invalid_request(format!(
                        "Removing the log level of the {ROOT} logger is not allowed"
                    )));
                }
                changes.push((logger, None));
            }
            OP_APPEND => {
                return Err(invalid_request(
                    "APPEND operation is not allowed for the BROKER_LOGGER resource".into(),
                ))
            }
            OP_SUBTRACT => {
                return Err(invalid_request(
                    "SUBTRACT operation is not allowed for the BROKER_LOGGER resource".into(),
                ))
            }
            other => {
                return Err(invalid_request(format!(
                    "Unknown operation type {other} is not allowed for the BROKER_LOGGER resource"
                )))
            }
        }
    }
    if validate_only {
        return Ok(());
    }
    for (logger, level) in &changes {
        match level {
            Some(level) => tracing::info!(logger, level, "log level set"),
            None => tracing::info!(logger, "log level unset"),
        }
    }
    levels.alter(changes).map_err(|e| AdminError {
        code: error::UNKNOWN_SERVER_ERROR,
        message: Some(format!("the log filter could not be changed: {e}")),
    })
}

impl LogLevels {
    /// Every logger with its level: `root`, the crates, and each logger a
    /// directive names, a logger nobody set at the level of the nearest
    /// one that covers it.
    pub fn loggers(&self) -> Vec<(String, String)> {
        let state = self.state.lock();
        let mut names: Vec<&str> = CRATES.to_vec();
        names.extend(state.levels.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .map(|name| (name.to_owned(), state.effective(name).to_owned()))
            .collect()
    }

    /// Whether `name` is a logger: `root`, one listed, or a path under a
    /// crate (`tarn_server::handlers`), which every target of that module
    /// carries.
    pub fn exists(&self, name: &str) -> bool {
        let state = self.state.lock();
        let under = |krate: &str| {
            name.strip_prefix(krate)
                .and_then(|rest| rest.strip_prefix("::"))
                .is_some_and(|path| path.split("::").all(is_identifier))
        };
        name == ROOT
            || state.levels.contains_key(name)
            || CRATES.iter().any(|krate| name == *krate || under(krate))
    }

    /// Sets each logger given a level (one of [`LEVELS`]) and takes away
    /// the own level of each given none, so that the logger covering it
    /// decides (`root` always keeps one); all at once, or none if the
    /// new filter cannot be applied.
    pub fn alter<'a>(
        &self,
        changes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<(), String> {
        let mut state = self.state.lock();
        let mut next = state.clone();
        for (logger, level) in changes {
            match level {
                Some(level) => {
                    next.levels.insert(logger.to_owned(), level.to_owned());
                }
                None if logger == ROOT => {}
                None => {
                    next.levels.remove(logger);
                }
            }
        }
        if let Some(apply) = self.apply.get() {
            apply(&next.filter())?;
        }
        *state = next;
        Ok(())
    }
}

impl State {
    /// Reads the directives of a log filter (`info,tarn_server=debug`):
    /// one without a target is root's level, one that selects spans or
    /// fields is kept aside, one without a level means TRACE (as the
    /// filter reads it).
    fn parse(filter: &str) -> State {
        let mut levels = BTreeMap::from([(ROOT.to_owned(), "INFO".to_owned())]);
        let mut other = Vec::new();
        for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            if directive.contains(['[', '{']) {
                other.push(directive.to_owned());
                continue;
            }
            let (target, level) = match directive.rsplit_once('=') {
                Some((target, level)) => (target, level),
                None => match kafka_level(directive) {
                    Some(_) => ("", directive),
                    None => (directive, "trace"),
                },
            };
            let Some(level) = kafka_level(level) else {
                other.push(directive.to_owned());
                continue;
            };
            let target = if target.is_empty() { ROOT } else { target };
            levels.insert(target.to_owned(), level.to_owned());
        }
        State { levels, other }
    }

    /// The level `name` logs at: its own, else that of the nearest logger
    /// covering it, else root's.
    fn effective(&self, name: &str) -> &str {
        let mut at = name;
        loop {
            if let Some(level) = self.levels.get(at) {
                return level;
            }
            match at.rsplit_once("::") {
                Some((parent, _)) => at = parent,
                None => return &self.levels[ROOT],
            }
        }
    }

    /// The filter these levels make.
    fn filter(&self) -> String {
        let mut directives = vec![filter_level(&self.levels[ROOT]).to_owned()];
        for (target, level) in &self.levels {
            if target != ROOT {
                directives.push(format!("{target}={}", filter_level(level)));
            }
        }
        directives.extend(self.other.iter().cloned());
        directives.join(",")
    }
}

/// Kafka's name for a log filter's level, if it is one.
fn kafka_level(level: &str) -> Option<&'static str> {
    Some(match level.to_ascii_lowercase().as_str() {
        "off" => "OFF",
        "error" => "ERROR",
        "warn" => "WARN",
        "info" => "INFO",
        "debug" => "DEBUG",
        "trace" => "TRACE",
        _ => return None,
    })
}

/// The log filter's name for a level.
fn filter_level(level: &str) -> &'static str {
    match level {
        "OFF" => "off",
        "FATAL" | "ERROR" => "error",
        "WARN" => "warn",
        "INFO" => "info",
        "DEBUG" => "debug",
        _ => "trace",
    }
}

/// A module path's part: not empty, letters, digits and underscores.
fn is_identifier(part: &str) -> bool {
    !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(filter: &str) -> LogLevels {
        LogLevels {
            state: Mutex::new(State::parse(filter)),
            apply: OnceLock::new(),
        }
    }

    #[test]
    fn a_filter_reads_as_loggers_and_writes_back() {
        let state = State::parse(
            "debug,openraft=warn,tarn_server::handlers=TRACE,tarn_storage,\
             tarn_quorum[span{x=1}]=info",
        );
        assert_eq!(state.levels[ROOT], "DEBUG");
        assert_eq!(state.levels["openraft"], "WARN");
        assert_eq!(state.levels["tarn_server::handlers"], "TRACE");
        assert_eq!(state.levels["tarn_storage"], "TRACE");
        assert_eq!(state.other, ["tarn_quorum[span{x=1}]=info"]);
        assert_eq!(
            state.filter(),
            "debug,openraft=warn,tarn_server::handlers=trace,tarn_storage=trace,\
             tarn_quorum[span{x=1}]=info"
        );
    }

    #[test]
    fn loggers_inherit_from_the_nearest_logger_that_covers_them() {
        let levels = levels("warn,tarn_server=debug");
        levels
            .alter([("tarn_server::handlers", Some("FATAL"))])
            .unwrap();
        let all: BTreeMap<String, String> = levels.loggers().into_iter().collect();
        assert_eq!(all[ROOT], "WARN");
        assert_eq!(all["tarn_storage"], "WARN");
        assert_eq!(all["tarn_server"], "DEBUG");
        assert_eq!(all["tarn_server::handlers"], "FATAL");
        assert_eq!(
            levels
                .state
                .lock()
                .effective("tarn_server::handlers::produce"),
            "FATAL"
        );
        assert_eq!(
            levels.state.lock().filter(),
            "warn,tarn_server=debug,tarn_server::handlers=error"
        );
        levels
            .alter([("tarn_server::handlers", None), (ROOT, None)])
            .unwrap();
        let all: BTreeMap<String, String> = levels.loggers().into_iter().collect();
        assert!(!all.contains_key("tarn_server::handlers"));
        assert_eq!(all[ROOT], "WARN");
    }

    #[test]
    fn loggers_are_root_the_crates_and_module_paths_under_them() {
        let levels = levels("info,custom_target=debug");
        for name in [
            ROOT,
            "tarn_server",
            "tarn_server::handlers::produce",
            "custom_target",
        ] {
            assert!(levels.exists(name), "{name}");
        }
        for name in [
            "",
            "kafka.server",
            "tarn_server::",
            "tarn_serverx",
            "tarn_server::a b",
        ] {
            assert!(!levels.exists(name), "{name}");
        }
    }

    #[test]
    fn a_filter_that_cannot_be_applied_changes_nothing() {
        let levels = levels("info");
        levels
            .apply
            .set(Box::new(|_| Err("refused".to_owned())))
            .unwrap_or_else(|_| panic!("set once"));
        assert_eq!(
            levels.alter([("tarn_server", Some("DEBUG"))]).unwrap_err(),
            "refused"
        );
        assert!(!levels.state.lock().levels.contains_key("tarn_server"));
    }
}
