//! Kafka's `meta.properties`, the file that ties a data directory to one
//! cluster and one node: `version=1`, `cluster.id`, `node.id` and
//! `directory.id` (Kafka's `MetaProperties`). Version 0 files, written by
//! ZooKeeper-era brokers, name the node `broker.id`. Parsing and rendering
//! are pure; the broker and `tarn storage` do the I/O.

use std::collections::BTreeMap;

/// The file's name inside the data directory.
pub const META_PROPERTIES_FILE: &str = "meta.properties";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    /// Kafka 3.7+ (KIP-858) names each directory; older files have none.
    pub directory_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("meta.properties: {0}")]
pub struct MetaPropertiesError(pub String);

impl MetaProperties {
    /// Reads the text of a `meta.properties` file.
    pub fn parse(text: &str) -> Result<MetaProperties, MetaPropertiesError> {
        let props: BTreeMap<String, String> = crate::properties::parse(text).into_iter().collect();
        let get = |key: &str| props.get(key).map(|v| v.trim());
        let node_key = match get("version") {
            Some("1") => "node.id",
            Some("0") => "broker.id",
            Some(other) => {
                return Err(MetaPropertiesError(format!(
                    "unknown version {other} (expected 0 or 1)"
                )))
            }
            None => return Err(MetaPropertiesError("no version".into())),
        };
        let node_id = get(node_key)
            .ok_or_else(|| MetaPropertiesError(format!("{node_key} was not found")))?;
        let node_id = node_id
            .parse()
            .map_err(|_| MetaPropertiesError(format!("{node_key} {node_id} is not an integer")))?;
        let cluster_id = get("cluster.id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| MetaPropertiesError("cluster.id was not found".into()))?;
        Ok(MetaProperties {
            cluster_id: cluster_id.to_owned(),
            node_id,
            directory_id: get("directory.id").map(str::to_owned),
        })
    }

    /// The file's text, version 1, as Kafka writes it (without its date
    /// comment). Ids are base64url and numbers, which need no escaping.
    pub fn render(&self) -> String {
        let mut text = format!("#\n#Written by Tarn\ncluster.id={}\n", self.cluster_id);
        if let Some(id) = &self.directory_id {
            text.push_str(&format!("directory.id={id}\n"));
        }
        text.push_str(&format!("node.id={}\nversion=1\n", self.node_id));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_kafka_writes() {
        let text =
            "#\n#Tue Oct 01 12:00:00 UTC 2024\nnode.id=1\ndirectory.id=aGVsbG8td29ybGQtMTIzNA\n\
                    version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n";
        let meta = MetaProperties::parse(text).unwrap();
        assert_eq!(
            meta,
            MetaProperties {
                cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
                node_id: 1,
                directory_id: Some("aGVsbG8td29ybGQtMTIzNA".into()),
            }
        );
        assert_eq!(MetaProperties::parse(&meta.render()).unwrap(), meta);
    }

    #[test]
    fn reads_tarns_older_files_and_version_0() {
        let meta = MetaProperties::parse("version=1\ncluster.id=abc\nnode.id=3\n").unwrap();
        assert_eq!((meta.node_id, meta.directory_id), (3, None));
        let meta = MetaProperties::parse("version=0\ncluster.id=abc\nbroker.id=4\n").unwrap();
        assert_eq!(meta.node_id, 4);
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        for (text, why) in [
            ("cluster.id=a\nnode.id=1\n", "no version"),
            ("version=2\ncluster.id=a\nnode.id=1\n", "unknown version"),
            ("version=1\ncluster.id=a\n", "node.id was not found"),
            ("version=1\ncluster.id=a\nnode.id=x\n", "not an integer"),
            ("version=1\nnode.id=1\n", "cluster.id was not found"),
        ] {
            let err = MetaProperties::parse(text).unwrap_err();
            assert!(err.to_string().contains(why), "{text}: {err}");
        }
    }
}
