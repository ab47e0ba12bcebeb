//! A consumer group's coordinator as the CLI reaches it: FindCoordinator
//! for the broker that runs the group, OffsetFetch for the group's
//! committed offsets and OffsetCommit for new ones. `groups` commits as an
//! administrator (generation -1, no member id: only an empty group takes
//! it); `consume --group` commits as a member of the current generation.
//! A Kafka error code always comes back as a [`CoordinatorError`] naming
//! it, so callers can tell the codes they retry from the ones they report.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Context, Result};

use tarn_protocol::error;
use tarn_protocol::messages::find_coordinator::{
    FindCoordinatorRequest, FindCoordinatorResponse, KEY_TYPE_GROUP,
};
use tarn_protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    OffsetCommitResponse,
};
use tarn_protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopic, OffsetFetchResponse,
};
use tarn_server::error_names::error_name;

use tarn_cli::client::Client;

use crate::cluster::{connect_bootstrap, TopicPartition};

/// A Kafka error name with its code and, for the group errors users meet
/// most, Kafka's explanation.
pub fn error_text(code: i16) -> String {
    let detail = match code {
        error::NON_EMPTY_GROUP => "The group is not empty.",
        error::GROUP_ID_NOT_FOUND => "The group id does not exist.",
        error::COORDINATOR_NOT_AVAILABLE => "The coordinator is not available.",
        error::NOT_COORDINATOR => "This is not the correct coordinator.",
        _ => "",
    };
    format!("{} ({code}) {detail}", error_name(code))
        .trim_end()
        .to_owned()
}

/// An error code a coordinator answered `action` on `group` with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorError {
    pub action: String,
    pub group: String,
    pub code: i16,
}

impl fmt::Display for CoordinatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} of group '{}': {}",
            self.action,
            self.group,
            error_text(self.code)
        )
    }
}

impl std::error::Error for CoordinatorError {}

impl CoordinatorError {
    fn new(action: impl Into<String>, group: &str, code: i16) -> CoordinatorError {
        CoordinatorError {
            action: action.into(),
            group: group.to_owned(),
            code,
        }
    }

    /// The code `error` carries, if a coordinator answered with one.
    pub fn code_of(error: &anyhow::Error) -> Option<i16> {
        error.downcast_ref::<CoordinatorError>().map(|e| e.code)
    }
}

/// A connection to the broker that coordinates `group`, sending
/// `client_id`.
pub fn find_coordinator(bootstrap: &str, group: &str, client_id: &str) -> Result<Client> {
    Ok(find_coordinator_node(bootstrap, group, client_id)?.0)
}

/// The broker that coordinates a group, as FindCoordinator names it.
#[derive(Debug, Clone)]
pub struct Coordinator {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// [`find_coordinator`], and which broker it is.
pub fn find_coordinator_node(
    bootstrap: &str,
    group: &str,
    client_id: &str,
) -> Result<(Client, Coordinator)> {
    let request = FindCoordinatorRequest {
        key: group.to_owned(),
        key_type: KEY_TYPE_GROUP,
        coordinator_keys: Vec::new(),
    };
    let response: FindCoordinatorResponse = connect_bootstrap(bootstrap)?
        .with_client_id(client_id)
        .call(10, 3, 3, &request)?;
    if response.error_code != error::NONE {
        return Err(
            CoordinatorError::new("find the coordinator", group, response.error_code).into(),
        );
    }
    let client =
        Client::connect(&format!("{}:{}", response.host, response.port))?.with_client_id(client_id);
    let node = Coordinator {
        node_id: response.node_id,
        host: response.host,
        port: response.port,
    };
    Ok((client, node))
}

/// The group's committed offsets: of `partitions`, or of every partition
/// that has one when `None`. Partitions without a committed offset are
/// left out.
pub fn committed_offsets(
    client: &mut Client,
    group: &str,
    partitions: Option<&[TopicPartition]>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let committed = committed_positions(client, group, partitions)?;
    Ok(committed
        .into_iter()
        .map(|(tp, position)| (tp, position.offset))
        .collect())
}

/// A committed offset and the leader epoch its committer last saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommittedPosition {
    pub offset: i64,
    /// `None` when the commit carried none.
    pub leader_epoch: Option<i32>,
}

/// [`committed_offsets`] with the leader epochs the commits carried.
pub fn committed_positions(
    client: &mut Client,
    group: &str,
    partitions: Option<&[TopicPartition]>,
) -> Result<BTreeMap<TopicPartition, CommittedPosition>> {
    let topics = partitions.map(|partitions| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, partition) in partitions {
            by_topic.entry(topic).or_default().push(*partition);
        }
        by_topic
            .into_iter()
            .map(|(name, partition_indexes)| OffsetFetchRequestTopic {
                name: name.to_owned(),
                partition_indexes,
                ..Default::default()
            })
            .collect()
    });
    let request = OffsetFetchRequest {
        group_id: group.to_owned(),
        topics,
        groups: Vec::new(),
        require_stable: false,
    };
    let response: OffsetFetchResponse = client.call(9, 7, 6, &request)?;
    if response.error_code != error::NONE {
        return Err(CoordinatorError::new("fetch the offsets", group, response.error_code).into());
    }
    let mut out = BTreeMap::new();
    for topic in response.topics {
        for p in topic.partitions {
            if p.error_code != error::NONE {
                let action = format!("fetch the offset of {}-{}", topic.name, p.partition_index);
                return Err(CoordinatorError::new(action, group, p.error_code).into());
            }
            if p.committed_offset >= 0 {
                let position = CommittedPosition {
                    offset: p.committed_offset,
                    leader_epoch: (p.committed_leader_epoch >= 0)
                        .then_some(p.committed_leader_epoch),
                };
                out.insert((topic.name.clone(), p.partition_index), position);
            }
        }
    }
    Ok(out)
}

/// Who commits: a member of a generation, or an administrator outside
/// any ([`Committer::ADMIN`]).
#[derive(Debug, Clone, Copy)]
pub struct Committer<'a> {
    pub generation_id: i32,
    pub member_id: &'a str,
    pub group_instance_id: Option<&'a str>,
}

impl Committer<'_> {
    /// Not a member: only a group without members accepts the commit.
    pub const ADMIN: Committer<'static> = Committer {
        generation_id: -1,
        member_id: "",
        group_instance_id: None,
    };
}

/// Commits `offsets` for `group` and returns the partitions the
/// coordinator refused, with its error code for each.
pub fn commit_offsets(
    client: &mut Client,
    group: &str,
    committer: Committer,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<BTreeMap<TopicPartition, i16>> {
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in offsets {
        topics
            .entry(topic)
            .or_default()
            .push(OffsetCommitRequestPartition {
                partition_index: *partition,
                committed_offset: *offset,
                committed_metadata: Some(String::new()),
                ..Default::default()
            });
    }
    let request = OffsetCommitRequest {
        group_id: group.to_owned(),
        generation_id_or_member_epoch: committer.generation_id,
        member_id: committer.member_id.to_owned(),
        group_instance_id: committer.group_instance_id.map(str::to_owned),
        retention_time_ms: -1,
        topics: topics
            .into_iter()
            .map(|(name, partitions)| OffsetCommitRequestTopic {
                name: name.to_owned(),
                partitions,
                ..Default::default()
            })
            .collect(),
    };
    let response: OffsetCommitResponse = client
        .call(8, 8, 8, &request)
        .with_context(|| format!("commit offsets of group '{group}'"))?;
    let mut refused = BTreeMap::new();
    for topic in response.topics {
        for p in topic.partitions {
            if p.error_code != error::NONE {
                refused.insert((topic.name.clone(), p.partition_index), p.error_code);
            }
        }
    }
    Ok(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_errors_name_the_code_and_can_be_read_back() {
        let e: anyhow::Error = CoordinatorError::new("fetch the offsets", "g", 16).into();
        assert_eq!(
            e.to_string(),
            "cannot fetch the offsets of group 'g': NOT_COORDINATOR (16) This is not the \
             correct coordinator."
        );
        assert_eq!(CoordinatorError::code_of(&e), Some(16));
        let wrapped = e.context("start");
        assert_eq!(CoordinatorError::code_of(&wrapped), Some(16));
        assert_eq!(CoordinatorError::code_of(&anyhow::anyhow!("io")), None);
    }
}
