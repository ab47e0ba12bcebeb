//! The group coordinator as the metrics and console's `GroupLagSource`:
//! groups with their members and assignments, and every committed offset.

use std::sync::Arc;

use tarn_protocol::consumer_protocol::{Assignment, PROTOCOL_TYPE};

use tarn_coordinator::group_lag::{CommittedOffset, GroupLagSource, GroupMember, GroupOverview};

use crate::broker::Broker;

/// Reads groups from the broker's coordinator; answers from memory only.
pub struct CoordinatorLagSource(pub Arc<Broker>);

impl GroupLagSource for CoordinatorLagSource {
    fn groups(&self) -> Vec<GroupOverview> {
        let Ok(groups) = self.0.groups.list(&[]) else {
            return Vec::new();
        };
        groups
            .into_iter()
            .map(|overview| {
                let members = self
                    .0
                    .groups
                    .describe(&overview.group_id)
                    .map(|summary| {
                        summary
                            .members
                            .into_iter()
                            .map(|m| GroupMember {
                                assignment: if overview.protocol_type == PROTOCOL_TYPE {
                                    consumer_assignment(&m.assignment)
                                } else {
                                    Vec::new()
                                },
                                member_id: m.member_id,
                                client_id: m.client_id,
                                client_host: m.client_host,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                GroupOverview {
                    state: overview.state.name().to_owned(),
                    protocol_type: overview.protocol_type,
                    group_id: overview.group_id,
                    members,
                }
            })
            .collect()
    }

    fn committed_offsets(&self) -> Vec<CommittedOffset> {
        let Ok(groups) = self.0.groups.list(&[]) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for overview in groups {
            let Ok(offsets) = self.0.groups.fetch_offsets(&overview.group_id, None) else {
                continue;
            };
            for ((topic, partition), committed) in offsets {
                if let Some(committed) = committed {
                    out.push(CommittedOffset {
                        group: overview.group_id.clone(),
                        topic,
                        partition,
                        committed_offset: committed.offset,
                    });
                }
            }
        }
        out
    }
}

/// The partitions of a consumer-protocol assignment; an assignment that
/// does not decode (another client's custom format) shows as none.
fn consumer_assignment(bytes: &bytes::Bytes) -> Vec<(String, i32)> {
    match Assignment::decode_prefixed(bytes) {
        Ok(assignment) => assignment
            .assigned_partitions
            .into_iter()
            .flat_map(|tp| {
                let topic = tp.topic;
                tp.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}
