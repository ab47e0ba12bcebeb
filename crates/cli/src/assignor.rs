//! The consumer's partition assignors, run by the group leader on every
//! member's subscription: Kafka's `RangeAssignor` ("range") and
//! `RoundRobinAssignor` ("roundrobin"), both eager. The result depends only
//! on the members and the partition counts: members are ordered as
//! Kafka's `MemberInfo` orders them (static members by
//! `group.instance.id` first, then dynamic ones by member id), so a Java,
//! librdkafka or tarn leader computes the same assignment from the same
//! group. Every partition of a subscribed topic goes to exactly one member
//! subscribed to it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};

/// One member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: BTreeSet<String>,
}

/// What each member gets: partitions by topic, by member id. Every member
/// appears, with nothing if it gets nothing.
pub type GroupAssignment = BTreeMap<String, BTreeMap<String, Vec<i32>>>;

/// A partition assignment strategy, by its protocol name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Range,
    RoundRobin,
}

impl Assignor {
    /// The protocol name members agree on in JoinGroup.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    /// The assignor a `partition.assignment.strategy` entry names: the
    /// protocol name or Kafka's class name.
    pub fn parse(text: &str) -> Result<Assignor> {
        match text.trim() {
            "range" | "org.apache.kafka.clients.consumer.RangeAssignor" => Ok(Assignor::Range),
            "roundrobin" | "org.apache.kafka.clients.consumer.RoundRobinAssignor" => {
                Ok(Assignor::RoundRobin)
            }
            other => bail!(
                "partition.assignment.strategy {other}: tarn consume has the eager range and \
                 roundrobin assignors (org.apache.kafka.clients.consumer.RangeAssignor, \
                 RoundRobinAssignor); sticky and cooperative-sticky are not implemented"
            ),
        }
    }

    /// The assignor with protocol name `name`, if this is one of ours.
    pub fn by_name(name: &str) -> Option<Assignor> {
        [Assignor::Range, Assignor::RoundRobin]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// Assigns the partitions of every subscribed topic found in
    /// `partition_counts` (topics missing there get nothing).
    pub fn assign(
        self,
        members: &[MemberSubscription],
        partition_counts: &BTreeMap<String, i32>,
    ) -> GroupAssignment {
        let mut sorted: Vec<&MemberSubscription> = members.iter().collect();
        sorted.sort_by(|a, b| member_order(a, b));
        let mut out: GroupAssignment = members
            .iter()
            .map(|m| (m.member_id.clone(), BTreeMap::new()))
            .collect();
        match self {
            Assignor::Range => range(&sorted, partition_counts, &mut out),
            Assignor::RoundRobin => round_robin(&sorted, partition_counts, &mut out),
        }
        out
    }
}

/// Kafka's `MemberInfo.compareTo`.
fn member_order(a: &MemberSubscription, b: &MemberSubscription) -> Ordering {
    match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    }
}

fn give(out: &mut GroupAssignment, member: &str, topic: &str, partition: i32) {
    out.entry(member.to_owned())
        .or_default()
        .entry(topic.to_owned())
        .or_default()
        .push(partition);
}

/// Each topic on its own: its subscribers in order get consecutive ranges,
/// the first `count % subscribers` of them one partition more.
fn range(
    sorted: &[&MemberSubscription],
    partition_counts: &BTreeMap<String, i32>,
    out: &mut GroupAssignment,
) {
    for (topic, &count) in partition_counts {
        let subscribers: Vec<&&MemberSubscription> =
            sorted.iter().filter(|m| m.topics.contains(topic)).collect();
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        let n = subscribers.len() as i32;
        let (per_member, extra) = (count / n, count % n);
        for (i, member) in subscribers.iter().enumerate() {
            let i = i as i32;
            let start = per_member * i + i.min(extra);
            let len = per_member + i32::from(i < extra);
            for partition in start..start + len {
                give(out, &member.member_id, topic, partition);
            }
        }
    }
}

/// Every partition of every topic in (topic, partition) order, dealt round
/// the members in order, skipping members not subscribed to its topic.
fn round_robin(
    sorted: &[&MemberSubscription],
    partition_counts: &BTreeMap<String, i32>,
    out: &mut GroupAssignment,
) {
    if sorted.is_empty() {
        return;
    }
    let mut next = 0usize;
    for (topic, &count) in partition_counts {
        if !sorted.iter().any(|m| m.topics.contains(topic)) {
            continue;
        }
        for partition in 0..count.max(0) {
            while !sorted[next % sorted.len()].topics.contains(topic) {
                next += 1;
            }
            give(
                out,
                &sorted[next % sorted.len()].member_id,
                topic,
                partition,
            );
            next += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, instance: Option<&str>, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            group_instance_id: instance.map(str::to_owned),
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn counts(topics: &[(&str, i32)]) -> BTreeMap<String, i32> {
        topics.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    /// `member -> "topic:p,p topic:p"` for compact assertions.
    fn show(assignment: &GroupAssignment) -> BTreeMap<String, String> {
        assignment
            .iter()
            .map(|(m, topics)| {
                let text: Vec<String> = topics
                    .iter()
                    .map(|(t, ps)| {
                        let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                        format!("{t}:{}", ps.join(","))
                    })
                    .collect();
                (m.clone(), text.join(" "))
            })
            .collect()
    }

    fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(m, a)| (m.to_string(), a.to_string()))
            .collect()
    }

    #[test]
    fn range_gives_consecutive_ranges_and_the_extra_partitions_to_the_first_members() {
        let members = [
            member("c", None, &["t0", "t1"]),
            member("a", None, &["t0", "t1"]),
            member("b", None, &["t0"]),
        ];
        let got = Assignor::Range.assign(&members, &counts(&[("t0", 4), ("t1", 3)]));
        // t0 over a, b, c: 2, 1, 1; t1 over a, c: 2, 1.
        assert_eq!(
            show(&got),
            expect(&[("a", "t0:0,1 t1:0,1"), ("b", "t0:2"), ("c", "t0:3 t1:2")])
        );
        // Two members on four partitions: two each, the split the console
        // test expects.
        let two = [member("m-2", None, &["t"]), member("m-1", None, &["t"])];
        let got = Assignor::Range.assign(&two, &counts(&[("t", 4)]));
        assert_eq!(show(&got), expect(&[("m-1", "t:0,1"), ("m-2", "t:2,3")]));
    }

    #[test]
    fn range_leaves_members_beyond_the_partition_count_empty() {
        let members: Vec<_> = ["d", "b", "a", "c", "e"]
            .iter()
            .map(|id| member(id, None, &["t"]))
            .collect();
        let got = Assignor::Range.assign(&members, &counts(&[("t", 3)]));
        assert_eq!(
            show(&got),
            expect(&[
                ("a", "t:0"),
                ("b", "t:1"),
                ("c", "t:2"),
                ("d", ""),
                ("e", "")
            ])
        );
    }

    #[test]
    fn static_members_come_first_ordered_by_instance_id() {
        let members = [
            member("a-dynamic", None, &["t"]),
            member("z", Some("i-2"), &["t"]),
            member("y", Some("i-1"), &["t"]),
        ];
        let got = Assignor::Range.assign(&members, &counts(&[("t", 3)]));
        assert_eq!(
            show(&got),
            expect(&[("y", "t:0"), ("z", "t:1"), ("a-dynamic", "t:2")])
        );
    }

    #[test]
    fn round_robin_deals_partitions_skipping_members_not_subscribed() {
        let members = [
            member("a", None, &["t0", "t1"]),
            member("b", None, &["t1"]),
            member("c", None, &["t0", "t1"]),
        ];
        let got = Assignor::RoundRobin.assign(&members, &counts(&[("t0", 3), ("t1", 3)]));
        // t0-0 a, t0-1 (b skipped) c, t0-2 a, t1-0 b, t1-1 c, t1-2 a.
        assert_eq!(
            show(&got),
            expect(&[("a", "t0:0,2 t1:2"), ("b", "t1:0"), ("c", "t0:1 t1:1")])
        );
    }

    #[test]
    fn unknown_topics_and_empty_groups_assign_nothing() {
        let members = [member("a", None, &["missing"])];
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            let got = assignor.assign(&members, &counts(&[("other", 2)]));
            assert_eq!(show(&got), expect(&[("a", "")]));
            assert!(assignor.assign(&[], &counts(&[("t", 2)])).is_empty());
        }
    }

    #[test]
    fn every_partition_goes_to_exactly_one_subscriber() {
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            for n_members in 1..6 {
                for n_partitions in 0..9 {
                    let members: Vec<_> = (0..n_members)
                        .map(|i| member(&format!("m{i}"), None, &["t"]))
                        .collect();
                    let got = assignor.assign(&members, &counts(&[("t", n_partitions)]));
                    let mut all: Vec<i32> = got
                        .values()
                        .flat_map(|topics| topics.get("t").cloned().unwrap_or_default())
                        .collect();
                    all.sort_unstable();
                    assert_eq!(all, (0..n_partitions).collect::<Vec<_>>());
                    let sizes: Vec<usize> = got
                        .values()
                        .map(|t| t.get("t").map_or(0, Vec::len))
                        .collect();
                    let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
                    assert!(hi.unwrap() - lo.unwrap() <= 1, "{assignor:?} {sizes:?}");
                }
            }
        }
    }

    #[test]
    fn strategies_parse_by_protocol_or_class_name() {
        assert_eq!(Assignor::parse("range").unwrap(), Assignor::Range);
        assert_eq!(
            Assignor::parse(" org.apache.kafka.clients.consumer.RoundRobinAssignor").unwrap(),
            Assignor::RoundRobin
        );
        let err = Assignor::parse("cooperative-sticky")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not implemented"), "{err}");
        assert_eq!(Assignor::by_name("roundrobin"), Some(Assignor::RoundRobin));
        assert_eq!(Assignor::by_name("sticky"), None);
    }
}
