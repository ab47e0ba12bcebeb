//! Replica placement for new partitions: Kafka's striped placer
//! (`StripedReplicaPlacer` in Kafka's `metadata` module), written afresh.
//!
//! Brokers are grouped by rack; brokers without a rack form one rack of
//! their own, ordered before every named rack. Racks are sorted by name and
//! each rack's brokers by id, then every list gets a random starting
//! offset. A partition takes its leader from the rack at the current rack
//! offset and each further replica from the next rack round the ring, so
//! the replicas of one partition sit on distinct racks whenever there are
//! at least as many racks as replicas. Each partition moves the rack
//! offset on by one, and a rack touched by a partition moves its own
//! broker offset on by one: that gives the "striped" pattern, and with
//! equal racks every broker leads once in each run of as many partitions
//! as there are brokers. After such a run the racks and their brokers are
//! shuffled, so long runs do not repeat the same replica sets.
//!
//! Fenced brokers (registered, but not heartbeating: stopped, say) are
//! placed on only once a rack's unfenced brokers are used up, and never as
//! the leader: each rack hands out its unfenced brokers first, then its
//! fenced ones, and the leader comes from the first rack at or after the
//! rack offset that has an unfenced broker left. So a topic of replication
//! factor 3 can be created while one of three brokers is down, under-
//! replicated until it returns, as Kafka creates it.
//!
//! Invariants kept: no broker appears twice in one partition, every
//! partition has exactly `replication_factor` replicas and an unfenced
//! leader, and the placement depends only on the brokers and the random
//! number generator, so a seed replays it.

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use rand::Rng;

use tarn_protocol::error::{self, ErrorCode};

/// A broker partitions may be placed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsableBroker<'a> {
    pub broker_id: i32,
    pub rack: Option<&'a str>,
    /// Registered but fenced: a follower only, once the unfenced brokers
    /// are used up.
    pub fenced: bool,
}

/// The replicas chosen for one new partition; the first is the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionPlacement {
    pub partition_id: i32,
    pub replicas: Vec<i32>,
}

/// Why no placement could be made. The texts are Kafka 4.4's, which name
/// cordoned log directories (KIP-1066) although Tarn has none, so clients
/// matching on them see the same words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("Invalid replication factor {0}: the replication factor must be positive.")]
    NonPositiveReplicationFactor(i16),
    #[error("All brokers are currently fenced, or have all their log directories cordoned.")]
    NoUsableBrokers,
    #[error("The target replication factor of {replication_factor} cannot be reached because only {brokers} broker(s) are registered or some brokers have all their log directories cordoned.")]
    TooFewBrokers {
        replication_factor: i16,
        brokers: usize,
    },
}

impl PlacementError {
    /// Kafka answers every placement failure with this code.
    pub fn code(&self) -> ErrorCode {
        error::INVALID_REPLICATION_FACTOR
    }
}

/// Places partitions `start .. start + partitions` with
/// `replication_factor` replicas each over `brokers`, which must be the
/// usable brokers (fenced ones marked), each listed once. Refused when no
/// broker is unfenced, or when fewer brokers than replicas are registered.
pub fn place(
    brokers: &[UsableBroker<'_>],
    start: i32,
    partitions: i32,
    replication_factor: i16,
    rng: &mut impl Rng,
) -> Result<Vec<PartitionPlacement>, PlacementError> {
    if replication_factor <= 0 {
        return Err(PlacementError::NonPositiveReplicationFactor(
            replication_factor,
        ));
    }
    if brokers.iter().all(|b| b.fenced) {
        return Err(PlacementError::NoUsableBrokers);
    }
    if replication_factor as usize > brokers.len() {
        return Err(PlacementError::TooFewBrokers {
            replication_factor,
            brokers: brokers.len(),
        });
    }
    let end = start
        .checked_add(partitions.max(0))
        .expect("callers bound partition ids well below i32::MAX");
    let mut racks = RackList::new(brokers, rng);
    Ok((start..end)
        .map(|partition_id| PartitionPlacement {
            partition_id,
            replicas: racks.place(replication_factor as usize, rng),
        })
        .collect())
}

/// One rack's brokers, handed out round-robin from a moving offset.
struct BrokerList {
    brokers: Vec<i32>,
    /// Where this partition's first pick from the list comes from.
    offset: usize,
    /// Picks made from the list for the current partition.
    taken: usize,
    /// The partition (a `RackList::generation`) the picks were for.
    generation: u64,
}

impl BrokerList {
    fn new(mut brokers: Vec<i32>, rng: &mut impl Rng) -> BrokerList {
        brokers.sort_unstable();
        BrokerList {
            offset: if brokers.is_empty() {
                0
            } else {
                rng.gen_range(0..brokers.len())
            },
            brokers,
            taken: 0,
            generation: 0,
        }
    }

    /// The next broker of this list for partition `generation`, or None
    /// once the partition has every broker of the list. The first pick for
    /// a partition after the list's first partition moves the offset on.
    fn next(&mut self, generation: u64) -> Option<i32> {
        if self.brokers.is_empty() {
            return None;
        }
        if self.generation != generation {
            self.generation = generation;
            self.taken = 0;
            self.offset = (self.offset + 1) % self.brokers.len();
        }
        if self.taken == self.brokers.len() {
            return None;
        }
        let broker = self.brokers[(self.offset + self.taken) % self.brokers.len()];
        self.taken += 1;
        Some(broker)
    }
}

/// One rack's unfenced brokers, handed out first, and its fenced ones.
struct Rack {
    unfenced: BrokerList,
    fenced: BrokerList,
}

impl Rack {
    /// The next broker of this rack for partition `generation`: unfenced
    /// ones while any is left, then fenced ones.
    fn next(&mut self, generation: u64) -> Option<i32> {
        self.unfenced
            .next(generation)
            .or_else(|| self.fenced.next(generation))
    }
}

struct RackList {
    /// Every rack with a usable broker, in rack order (unnamed first, then
    /// by name) until the first shuffle.
    racks: Vec<Rack>,
    unfenced_total: usize,
    /// Which rack gives the next partition its leader (or the first rack
    /// after it with an unfenced broker).
    offset: usize,
    /// Counts partitions placed; never repeats, unlike Kafka's epoch, so a
    /// rack untouched for a whole run still starts afresh after a shuffle.
    generation: u64,
    placed_since_shuffle: usize,
}

impl RackList {
    fn new(brokers: &[UsableBroker<'_>], rng: &mut impl Rng) -> RackList {
        // `None` orders before every rack name, as Kafka orders an empty
        // Optional first.
        let mut by_rack: BTreeMap<Option<&str>, (Vec<i32>, Vec<i32>)> = BTreeMap::new();
        for broker in brokers {
            let (unfenced, fenced) = by_rack.entry(broker.rack).or_default();
            if broker.fenced {
                fenced.push(broker.broker_id);
            } else {
                unfenced.push(broker.broker_id);
            }
        }
        let racks: Vec<Rack> = by_rack
            .into_values()
            .map(|(unfenced, fenced)| Rack {
                fenced: BrokerList::new(fenced, rng),
                unfenced: BrokerList::new(unfenced, rng),
            })
            .collect();
        RackList {
            offset: rng.gen_range(0..racks.len()),
            racks,
            unfenced_total: brokers.iter().filter(|b| !b.fenced).count(),
            generation: 0,
            placed_since_shuffle: 0,
        }
    }

    /// The replicas of the next partition: the leader, an unfenced broker,
    /// from the first rack at or after the rack offset that has one, then
    /// one from each rack in turn from the offset on (the leader's rack
    /// skipped once), wrapping round (and so reusing racks) only when
    /// there are fewer racks than replicas.
    fn place(&mut self, replication_factor: usize, rng: &mut impl Rng) -> Vec<i32> {
        // As many partitions as unfenced brokers (the possible leaders)
        // have been placed: reshuffle so the next run does not repeat the
        // same replica sets. One has nothing to reshuffle.
        if self.placed_since_shuffle == self.unfenced_total && self.unfenced_total > 1 {
            self.shuffle(rng);
            self.placed_since_shuffle = 0;
        }
        let racks_len = self.racks.len();
        self.offset %= racks_len;
        let generation = self.generation;
        let mut replicas = Vec::with_capacity(replication_factor);
        // Some rack has an unfenced broker (`place` checked), and this
        // partition has taken none yet, so one pass round finds the leader.
        let (leader_rack, leader) = (0..racks_len)
            .map(|step| (self.offset + step) % racks_len)
            .find_map(|rack| Some((rack, self.racks[rack].unfenced.next(generation)?)))
            .expect("some rack has an unfenced broker");
        replicas.push(leader);
        // The leader's rack is skipped once, on the first pass only.
        let mut skip = Some(leader_rack);
        let mut rack = self.offset;
        // Within one partition each rack yields each of its brokers once,
        // and replication_factor <= the brokers, so every pass round the
        // racks (plus the one skip) yields a replica until there are enough.
        let mut steps_left = replication_factor * racks_len + 1;
        while replicas.len() < replication_factor {
            assert!(steps_left > 0, "placement ran out of brokers");
            steps_left -= 1;
            if skip == Some(rack) {
                skip = None;
            } else if let Some(broker) = self.racks[rack].next(generation) {
                replicas.push(broker);
            }
            rack = (rack + 1) % racks_len;
        }
        self.generation += 1;
        self.placed_since_shuffle += 1;
        self.offset += 1;
        replicas
    }

    fn shuffle(&mut self, rng: &mut impl Rng) {
        self.racks.shuffle(rng);
        for rack in &mut self.racks {
            rack.unfenced.brokers.shuffle(rng);
            rack.fenced.brokers.shuffle(rng);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    fn brokers<'a>(racks: &[Option<&'a str>]) -> Vec<UsableBroker<'a>> {
        racks
            .iter()
            .enumerate()
            .map(|(i, rack)| UsableBroker {
                broker_id: i as i32 + 1,
                rack: *rack,
                fenced: false,
            })
            .collect()
    }

    fn leader_counts(placed: &[PartitionPlacement]) -> BTreeMap<i32, usize> {
        let mut counts = BTreeMap::new();
        for p in placed {
            *counts.entry(p.replicas[0]).or_default() += 1;
        }
        counts
    }

    fn assert_leaders_balanced(usable: &[UsableBroker<'_>], placed: &[PartitionPlacement]) {
        let counts = leader_counts(placed);
        let (low, high) = (
            placed.len() / usable.len(),
            placed.len().div_ceil(usable.len()),
        );
        for b in usable {
            let led = counts.get(&b.broker_id).copied().unwrap_or(0);
            assert!(
                (low..=high).contains(&led),
                "broker {} leads {led} of {} partitions, not {low}..={high}: {counts:?}",
                b.broker_id,
                placed.len()
            );
        }
    }

    #[test]
    fn leaders_are_balanced_without_racks() {
        for seed in 0..20 {
            for broker_count in 1..=7 {
                let usable = brokers(&vec![None; broker_count]);
                for rf in 1..=broker_count as i16 {
                    for partitions in [1, broker_count as i32 - 1, 10, 31, 100] {
                        let mut rng = StdRng::seed_from_u64(seed);
                        let placed = place(&usable, 0, partitions, rf, &mut rng).unwrap();
                        assert_eq!(placed.len(), partitions.max(0) as usize);
                        assert_leaders_balanced(&usable, &placed);
                    }
                }
            }
        }
    }

    #[test]
    fn leaders_are_balanced_over_equal_racks_when_each_partition_skips_some() {
        // Leaders stay within one of even whenever a rack is not touched by
        // every partition (rf 1 here) or its size is prime to the number of
        // racks; Kafka's placer gives no such bound when every partition
        // touches every rack of a size sharing a factor with the rack count.
        let usable = brokers(&[
            Some("a"),
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("b"),
        ]);
        for seed in 0..20 {
            for rf in [1, 2] {
                let mut rng = StdRng::seed_from_u64(seed);
                let placed = place(&usable, 0, 60, rf, &mut rng).unwrap();
                assert_leaders_balanced(&usable, &placed);
            }
        }
    }

    #[test]
    fn no_broker_twice_in_a_partition() {
        let layouts: [&[Option<&str>]; 4] = [
            &[None, None, None, None, None],
            &[Some("a"), Some("a"), Some("a"), Some("a"), Some("b")],
            &[None, Some("a"), Some("b"), Some("b")],
            &[
                Some("x"),
                Some("y"),
                Some("z"),
                Some("x"),
                Some("y"),
                Some("z"),
            ],
        ];
        for layout in layouts {
            let usable = brokers(layout);
            for seed in 0..20 {
                for rf in 1..=usable.len() as i16 {
                    let mut rng = StdRng::seed_from_u64(seed);
                    for p in place(&usable, 3, 50, rf, &mut rng).unwrap() {
                        let distinct: BTreeSet<i32> = p.replicas.iter().copied().collect();
                        assert_eq!(p.replicas.len(), rf as usize, "{layout:?} {p:?}");
                        assert_eq!(distinct.len(), rf as usize, "{layout:?} {p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn replicas_sit_on_distinct_racks_when_there_are_enough() {
        let layout = [
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("b"),
            Some("c"),
            None,
            None,
        ];
        let usable = brokers(&layout);
        let rack_of = |id: i32| layout[id as usize - 1];
        // Four racks: the unnamed one counts as a rack, as in Kafka.
        for seed in 0..50 {
            for rf in 1..=4 {
                let mut rng = StdRng::seed_from_u64(seed);
                for p in place(&usable, 0, 40, rf, &mut rng).unwrap() {
                    let racks: BTreeSet<Option<&str>> =
                        p.replicas.iter().map(|&id| rack_of(id)).collect();
                    assert_eq!(racks.len(), rf as usize, "seed {seed}: {p:?}");
                }
            }
        }
    }

    #[test]
    fn fenced_brokers_follow_only_when_the_unfenced_are_used_up() {
        let layouts: [&[Option<&str>]; 3] = [
            &[None, None, None, None],
            &[Some("a"), Some("b"), Some("c"), Some("d")],
            &[Some("a"), Some("a"), Some("b"), Some("b")],
        ];
        for layout in layouts {
            for fenced in [&[1][..], &[2, 3], &[1, 2, 4]] {
                let usable: Vec<UsableBroker<'_>> = brokers(layout)
                    .into_iter()
                    .map(|b| UsableBroker {
                        fenced: fenced.contains(&b.broker_id),
                        ..b
                    })
                    .collect();
                let unfenced = usable.len() - fenced.len();
                for seed in 0..20 {
                    for rf in 1..=usable.len() as i16 {
                        let mut rng = StdRng::seed_from_u64(seed);
                        for p in place(&usable, 0, 24, rf, &mut rng).unwrap() {
                            let case = format!("{layout:?} fenced {fenced:?} rf {rf}: {p:?}");
                            assert!(!fenced.contains(&p.replicas[0]), "{case}");
                            let distinct: BTreeSet<i32> = p.replicas.iter().copied().collect();
                            assert_eq!(distinct.len(), rf as usize, "{case}");
                            let on_fenced =
                                p.replicas.iter().filter(|b| fenced.contains(b)).count();
                            // One rack holds every broker: its unfenced ones
                            // go first. With racks, a rack's fenced broker may
                            // come before another rack's unfenced one, as in
                            // Kafka's placer, but never more than needed to
                            // spread over racks.
                            if layout.iter().all(Option::is_none) {
                                assert_eq!(
                                    on_fenced,
                                    (rf as usize).saturating_sub(unfenced),
                                    "{case}"
                                );
                            }
                        }
                    }
                }
            }
        }
        let all_fenced: Vec<UsableBroker<'_>> = brokers(&[None, None])
            .into_iter()
            .map(|b| UsableBroker { fenced: true, ..b })
            .collect();
        let err = place(&all_fenced, 0, 1, 1, &mut StdRng::seed_from_u64(0)).unwrap_err();
        assert_eq!(err, PlacementError::NoUsableBrokers);
    }

    #[test]
    fn partition_ids_start_where_asked() {
        let usable = brokers(&[None, None]);
        let placed = place(&usable, 4, 3, 1, &mut StdRng::seed_from_u64(1)).unwrap();
        let ids: Vec<i32> = placed.iter().map(|p| p.partition_id).collect();
        assert_eq!(ids, [4, 5, 6]);
    }

    #[test]
    fn a_seed_replays_the_placement() {
        let usable = brokers(&[Some("a"), Some("b"), Some("a"), None, Some("c")]);
        let run = |seed| place(&usable, 0, 64, 3, &mut StdRng::seed_from_u64(seed)).unwrap();
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8), "the seed should matter");
    }

    #[test]
    fn refusals_carry_kafkas_words() {
        let mut rng = StdRng::seed_from_u64(0);
        let usable = brokers(&[None, None]);
        let err = place(&usable, 0, 1, 3, &mut rng).unwrap_err();
        assert_eq!(err.code(), error::INVALID_REPLICATION_FACTOR);
        assert_eq!(
            err.to_string(),
            "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered or some brokers have all their log directories cordoned."
        );
        let err = place(&[], 0, 1, 1, &mut rng).unwrap_err();
        assert_eq!(err.code(), error::INVALID_REPLICATION_FACTOR);
        assert_eq!(
            err.to_string(),
            "All brokers are currently fenced, or have all their log directories cordoned."
        );
        let err = place(&usable, 0, 1, 0, &mut rng).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid replication factor 0: the replication factor must be positive."
        );
    }
}
