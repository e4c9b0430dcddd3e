//! The proxy's protocol history, judged: every OffsetCommit the broker accepted, in the order its
//! responses went back, must not move a partition's committed offset backwards
//! (monotonic-checkpoint); a commit of a generation older than the group's newest that the broker
//! accepted is the broker's doing (nisshi-broker 0.6.0 accepts them while a group forms: the
//! model's `broker-relaxed` row), reported as such and never blamed on the application.
//!
//! The history is also written out, one JSON object per line, for the user to read.

use kafka_lane::proxy::wire::{Answer, PartitionOffset, Said};
use kafka_lane::proxy::{Event, What};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// What the history showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub connections: usize,
    pub requests: usize,
    /// OffsetCommit requests, and those the broker accepted for every partition.
    pub commits: usize,
    pub commits_accepted: usize,
    /// Requests or responses the codec could not decode (forwarded all the same).
    pub undecoded: usize,
    /// Group generations the broker handed out (JoinGroup responses without error).
    pub generations: usize,
    /// The application's: an accepted commit of the newest generation that moved back.
    pub backwards: Vec<String>,
    /// The broker's: an accepted commit of an older generation (moving back or not).
    pub stale_accepted: Vec<String>,
}

/// A request waiting for its response in the history.
struct Asked<'a> {
    at_ms: u64,
    said: &'a Said,
}

/// Judges `events` (in the proxy's order).
pub fn judge(events: &[Event]) -> Findings {
    let mut findings = Findings::default();
    let mut owners: BTreeMap<u64, String> = BTreeMap::new();
    let owner = |owners: &BTreeMap<u64, String>, conn: u64| {
        owners.get(&conn).cloned().unwrap_or_else(|| format!("the client of connection {conn}"))
    };
    let mut asked: BTreeMap<(u64, i32), Asked> = BTreeMap::new();
    // The newest generation handed out per group, and each partition's committed offset.
    let mut newest: BTreeMap<String, i32> = BTreeMap::new();
    let mut committed: BTreeMap<(String, String, i32), (i64, u64)> = BTreeMap::new();
    for event in events {
        match &event.what {
            What::Opened { owner } => {
                findings.connections += 1;
                if let Some(owner) = owner {
                    owners.insert(event.conn, owner.clone());
                }
            }
            What::Request { correlation, said, .. } => {
                findings.requests += 1;
                if matches!(said, Said::Other { why: Some(_) }) {
                    findings.undecoded += 1;
                }
                if matches!(said, Said::Commit { .. }) {
                    findings.commits += 1;
                }
                asked.insert((event.conn, *correlation), Asked { at_ms: event.at_ms, said });
            }
            What::Response { correlation, answer, .. } => {
                if matches!(answer, Answer::Other { why: Some(_) }) {
                    findings.undecoded += 1;
                }
                let Some(request) = asked.remove(&(event.conn, *correlation)) else { continue };
                match (request.said, answer) {
                    (Said::Join { group, .. }, Answer::Joined { error: 0, generation, .. }) => {
                        findings.generations += 1;
                        let entry = newest.entry(group.clone()).or_insert(*generation);
                        *entry = (*entry).max(*generation);
                    }
                    (Said::Commit { group, generation, member, offsets }, Answer::Committed { errors }) => {
                        let accepted = !errors.is_empty() && errors.iter().all(|(_, _, error)| *error == 0);
                        if !accepted {
                            continue;
                        }
                        findings.commits_accepted += 1;
                        let current = newest.get(group).copied().unwrap_or(*generation);
                        let who = format!("{} (member {member}, generation {generation})", owner(&owners, event.conn));
                        let stale = *generation >= 0 && *generation < current;
                        if stale {
                            findings.stale_accepted.push(format!(
                                "the broker accepted {who}'s commit of {} at {} ms while generation {current} was the group's newest: the broker's relaxed fence (model row broker-relaxed), not the application's",
                                offsets_text(offsets),
                                event.at_ms
                            ));
                        }
                        for offset in offsets {
                            let key = (group.clone(), offset.topic.clone(), offset.partition);
                            if let Some((before, before_ms)) = committed.get(&key).copied() {
                                if offset.offset < before && !stale {
                                    findings.backwards.push(format!(
                                        "the committed offset of {}:{} moved back from {before} (at {before_ms} ms) to {} by {who} (asked at {} ms, accepted at {} ms)",
                                        offset.topic, offset.partition, offset.offset, request.at_ms, event.at_ms
                                    ));
                                }
                            }
                            committed.insert(key, (offset.offset, event.at_ms));
                        }
                    }
                    _ => {}
                }
            }
            What::Fault { .. } | What::Closed { .. } => {}
        }
    }
    findings
}

/// One request and its response, with the connection's owner.
pub struct Exchange<'a> {
    pub owner: Option<&'a str>,
    pub said: &'a Said,
    pub answer: &'a Answer,
    pub answered_ms: u64,
}

/// Every answered request, in the order the responses went back.
pub fn exchanges(events: &[Event]) -> Vec<Exchange<'_>> {
    let mut owners: BTreeMap<u64, &str> = BTreeMap::new();
    let mut asked: BTreeMap<(u64, i32), &Said> = BTreeMap::new();
    let mut answered = Vec::new();
    for event in events {
        match &event.what {
            What::Opened { owner: Some(owner) } => {
                owners.insert(event.conn, owner.as_str());
            }
            What::Request { correlation, said, .. } => {
                asked.insert((event.conn, *correlation), said);
            }
            What::Response { correlation, answer, .. } => {
                if let Some(said) = asked.remove(&(event.conn, *correlation)) {
                    let owner = owners.get(&event.conn).copied();
                    answered.push(Exchange { owner, said, answer, answered_ms: event.at_ms });
                }
            }
            What::Opened { owner: None } | What::Fault { .. } | What::Closed { .. } => {}
        }
    }
    answered
}

/// An instance's place in its group: its member id, the generation it synced last, and the
/// partitions that sync gave it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    pub member: String,
    pub generation: i32,
    pub partitions: Vec<(String, i32)>,
}

/// `owner`'s last successful sync, as the history shows it.
pub fn membership(events: &[Event], owner: &str) -> Option<Membership> {
    let mut last = None;
    for exchange in exchanges(events) {
        if exchange.owner != Some(owner) {
            continue;
        }
        if let (Said::Sync { generation, member, .. }, Answer::Synced { error: 0, assigned }) =
            (exchange.said, exchange.answer)
        {
            last = Some(Membership { member: member.clone(), generation: *generation, partitions: assigned.clone() });
        }
    }
    last
}

/// The first sync of a newer generation than `since`'s that gave another owner one of
/// `since`'s partitions (any partition, when it held none): who, when, which generation.
pub fn reassigned(events: &[Event], owner: &str, since: &Membership) -> Option<(String, u64, i32)> {
    exchanges(events).into_iter().find_map(|exchange| {
        let (Said::Sync { generation, .. }, Answer::Synced { error: 0, assigned }) = (exchange.said, exchange.answer)
        else {
            return None;
        };
        let other = exchange.owner.filter(|other| *other != owner)?;
        let moved = since.partitions.is_empty() || assigned.iter().any(|p| since.partitions.contains(p));
        (*generation > since.generation && moved).then(|| (other.to_string(), exchange.answered_ms, *generation))
    })
}

/// When `owner` next completed a sync after `after_ms` (it rejoined its group).
pub fn rejoined(events: &[Event], owner: &str, after_ms: u64) -> Option<u64> {
    exchanges(events).into_iter().find_map(|exchange| {
        let synced = matches!((exchange.said, exchange.answer), (Said::Sync { .. }, Answer::Synced { error: 0, .. }));
        (synced && exchange.owner == Some(owner) && exchange.answered_ms > after_ms).then_some(exchange.answered_ms)
    })
}

/// The partitions that moved from one instance to another, and those that moved with records
/// in flight: records the old owner had fetched (its last Fetch position past them) that the
/// new owner fetched again (its first Fetch position before the old one's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moves {
    pub moved: usize,
    /// Per move with records in flight: the partition, from whom, to whom, when (the new
    /// owner's sync), the old owner's position and the new owner's start.
    pub in_flight: Vec<InFlight>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub partition: (String, i32),
    pub from: String,
    pub to: String,
    pub at_ms: u64,
    pub from_position: i64,
    pub to_start: i64,
}

impl Moves {
    /// The report's line: the moves, those with records in flight, and the first of those.
    pub fn line(&self) -> String {
        let first = match self.in_flight.first() {
            None => String::new(),
            Some(first) => format!(
                " (the first: {}:{} from {} to {} at {} ms, fetched up to offset {} there, fetched again from {})",
                first.partition.0,
                first.partition.1,
                first.from,
                first.to,
                first.at_ms,
                first.from_position,
                first.to_start
            ),
        };
        format!(
            "partition moves: {} between instances, {} with records in flight{first}",
            self.moved,
            self.in_flight.len()
        )
    }
}

/// A move whose new owner has not fetched the partition yet.
struct Pending {
    topic: String,
    from: String,
    to: String,
    at_ms: u64,
    from_position: Option<i64>,
}

/// Every partition's moves between instances (in the order the syncs were answered), with the
/// records in flight at each.
pub fn moves(events: &[Event]) -> Moves {
    let mut found = Moves::default();
    let mut owners: BTreeMap<u64, &str> = BTreeMap::new();
    let mut syncs: BTreeMap<(u64, i32), i32> = BTreeMap::new();
    // By partition number alone: the run's group reads one topic, which SyncGroup names and
    // Fetch (version 13 on) gives by its id.
    let mut holders: BTreeMap<i32, (&str, i32)> = BTreeMap::new();
    let mut positions: BTreeMap<(&str, i32), i64> = BTreeMap::new();
    let mut pending: BTreeMap<i32, Pending> = BTreeMap::new();
    for event in events {
        match &event.what {
            What::Opened { owner: Some(owner) } => {
                owners.insert(event.conn, owner.as_str());
            }
            What::Request { correlation, said: Said::Sync { generation, .. }, .. } => {
                syncs.insert((event.conn, *correlation), *generation);
            }
            What::Request { said: Said::Fetch { offsets }, .. } => {
                let Some(&owner) = owners.get(&event.conn) else { continue };
                for offset in offsets {
                    let partition = offset.partition;
                    if let Some(move_) = pending.get(&partition).filter(|move_| move_.to == owner) {
                        if let Some(from_position) = move_.from_position.filter(|&position| offset.offset < position) {
                            found.in_flight.push(InFlight {
                                partition: (move_.topic.clone(), partition),
                                from: move_.from.clone(),
                                to: owner.to_string(),
                                at_ms: move_.at_ms,
                                from_position,
                                to_start: offset.offset,
                            });
                        }
                        pending.remove(&partition);
                    }
                    positions.insert((owner, partition), offset.offset);
                }
            }
            What::Response { correlation, answer: Answer::Synced { error: 0, assigned }, .. } => {
                let (Some(generation), Some(&owner)) =
                    (syncs.remove(&(event.conn, *correlation)), owners.get(&event.conn))
                else {
                    continue;
                };
                for (topic, partition) in assigned {
                    let before = holders.insert(*partition, (owner, generation));
                    let Some((from, from_generation)) = before.filter(|(from, _)| *from != owner) else { continue };
                    if from_generation >= generation {
                        continue;
                    }
                    found.moved += 1;
                    let from_position = positions.get(&(from, *partition)).copied();
                    let (from, to, topic) = (from.to_string(), owner.to_string(), topic.clone());
                    pending.insert(*partition, Pending { topic, from, to, at_ms: event.at_ms, from_position });
                }
            }
            What::Opened { owner: None }
            | What::Request { .. }
            | What::Response { .. }
            | What::Fault { .. }
            | What::Closed { .. } => {}
        }
    }
    found
}

fn offsets_text(offsets: &[PartitionOffset]) -> String {
    let parts: Vec<String> = offsets.iter().map(|o| format!("{}:{}={}", o.topic, o.partition, o.offset)).collect();
    parts.join(" ")
}

impl Findings {
    /// The report's line on the history.
    pub fn line(&self, path: &Path) -> String {
        format!(
            "protocol history: {} requests on {} connections through the proxy, {} OffsetCommits ({} accepted), {} generations, {} frames the codec could not read (forwarded as they came); {}",
            self.requests,
            self.connections,
            self.commits,
            self.commits_accepted,
            self.generations,
            self.undecoded,
            path.display()
        )
    }
}

/// Writes the history, one JSON object per line.
pub fn write(events: &[Event], path: &Path) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for event in events {
        serde_json::to_writer(&mut file, event).map_err(std::io::Error::other)?;
        file.write_all(b"\n")?;
    }
    file.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_ms: u64, conn: u64, what: What) -> Event {
        Event { at_ms, conn, peer_port: 40_000 + conn as u16, what }
    }

    fn commit(conn: u64, correlation: i32, generation: i32, offset: i64) -> [Event; 2] {
        let offsets = vec![PartitionOffset { topic: "t".into(), partition: 0, offset }];
        let said = Said::Commit { group: "g".into(), generation, member: format!("m{conn}"), offsets };
        let errors = vec![("t".into(), 0, 0)];
        [
            event(0, conn, What::Request { api: "OffsetCommit", version: 8, correlation, said }),
            event(1, conn, What::Response { api: "OffsetCommit", correlation, answer: Answer::Committed { errors } }),
        ]
    }

    fn join(conn: u64, correlation: i32, generation: i32) -> [Event; 2] {
        let said = Said::Join { group: "g".into(), member: String::new() };
        let answer = Answer::Joined { error: 0, generation, member: format!("m{conn}"), leader: "m1".into() };
        [
            event(0, conn, What::Request { api: "JoinGroup", version: 5, correlation, said }),
            event(1, conn, What::Response { api: "JoinGroup", correlation, answer }),
        ]
    }

    /// A table of histories: (events, commits moved back by the application, stale commits the
    /// broker accepted).
    #[test]
    fn a_commit_moving_back_is_the_applications_and_an_old_generations_the_brokers() {
        let table: Vec<(Vec<Event>, usize, usize)> = vec![
            // Forward commits of one generation: nothing.
            ([join(1, 1, 1), commit(1, 2, 1, 5), commit(1, 3, 1, 9)].concat(), 0, 0),
            // The same generation commits 5 after 9: the application moved the checkpoint back.
            ([join(1, 1, 1), commit(1, 2, 1, 9), commit(1, 3, 1, 5)].concat(), 1, 0),
            // Generation 1's commit of 5 accepted after generation 2's 9: the broker's.
            ([join(1, 1, 1), join(2, 1, 2), commit(2, 2, 2, 9), commit(1, 2, 1, 5)].concat(), 0, 1),
        ];
        for (index, (events, backwards, stale)) in table.into_iter().enumerate() {
            let findings = judge(&events);
            assert_eq!(findings.backwards.len(), backwards, "history {index}: {findings:?}");
            assert_eq!(findings.stale_accepted.len(), stale, "history {index}: {findings:?}");
        }
    }

    fn opened(conn: u64, owner: &str) -> Event {
        event(0, conn, What::Opened { owner: Some(owner.into()) })
    }

    fn sync(conn: u64, correlation: i32, generation: i32, at_ms: u64, assigned: &[i32]) -> [Event; 2] {
        let said = Said::Sync { group: "g".into(), generation, member: format!("m{conn}") };
        let assigned = assigned.iter().map(|p| ("t".to_string(), *p)).collect();
        [
            event(at_ms, conn, What::Request { api: "SyncGroup", version: 5, correlation, said }),
            event(
                at_ms,
                conn,
                What::Response { api: "SyncGroup", correlation, answer: Answer::Synced { error: 0, assigned } },
            ),
        ]
    }

    /// A zombie's partitions: what it synced last, when another owner synced one of them in a
    /// newer generation, and when it synced again itself.
    #[test]
    fn a_partition_moves_when_another_owner_syncs_it_in_a_newer_generation() {
        let events = [
            vec![opened(1, "app-1"), opened(2, "app-2")],
            sync(1, 1, 1, 10, &[0]).to_vec(),
            sync(2, 1, 1, 11, &[1]).to_vec(),
            sync(2, 2, 2, 50, &[1]).to_vec(),
            sync(2, 3, 3, 90, &[0, 1]).to_vec(),
            sync(1, 2, 4, 120, &[0]).to_vec(),
        ]
        .concat();
        let held = membership(&events[..6], "app-1").expect("app-1 synced");
        assert_eq!(held, Membership { member: "m1".into(), generation: 1, partitions: vec![("t".into(), 0)] });
        assert_eq!(reassigned(&events, "app-1", &held), Some(("app-2".into(), 90, 3)));
        assert_eq!(rejoined(&events, "app-1", 90), Some(120));
        assert_eq!(rejoined(&events, "app-1", 120), None);
    }

    /// A Fetch request naming its topic by id, as version 13 on does (SyncGroup names it).
    fn fetch(conn: u64, correlation: i32, at_ms: u64, partition: i32, offset: i64) -> Event {
        let offsets = vec![PartitionOffset { topic: "01a2501b6c99722c877b3a1dde195d6f".into(), partition, offset }];
        event(at_ms, conn, What::Request { api: "Fetch", version: 11, correlation, said: Said::Fetch { offsets } })
    }

    /// A partition moves when another instance syncs it in a newer generation; records were in
    /// flight when the new owner's first fetch starts before the old owner's last position. A
    /// table of (the new owner's first fetch offset, moves with records in flight).
    #[test]
    fn a_move_has_records_in_flight_when_the_new_owner_starts_before_the_old_ones_position() {
        for (start, in_flight) in [(3, 1), (7, 0), (9, 0)] {
            let events = [
                vec![opened(1, "app-1 (incarnation 1)"), opened(2, "app-2 (incarnation 1)")],
                sync(1, 1, 1, 10, &[0, 1]).to_vec(),
                vec![fetch(1, 2, 12, 0, 0), fetch(1, 3, 14, 0, 7), fetch(1, 4, 15, 1, 2)],
                // A resync of the same owner is no move; app-2 takes partition 0 in generation 2.
                sync(1, 5, 2, 20, &[1]).to_vec(),
                sync(2, 1, 2, 21, &[0]).to_vec(),
                vec![fetch(2, 2, 22, 0, start), fetch(2, 3, 23, 0, start + 1)],
            ]
            .concat();
            let found = moves(&events);
            assert_eq!(found.moved, 1, "start {start}: {found:?}");
            assert_eq!(found.in_flight.len(), in_flight, "start {start}: {found:?}");
            if let Some(first) = found.in_flight.first() {
                let expected = InFlight {
                    partition: ("t".into(), 0),
                    from: "app-1 (incarnation 1)".into(),
                    to: "app-2 (incarnation 1)".into(),
                    at_ms: 21,
                    from_position: 7,
                    to_start: 3,
                };
                assert_eq!(first, &expected);
            }
        }
    }

    /// A refused commit (an error code) moves nothing.
    #[test]
    fn a_refused_commit_moves_nothing() {
        let mut events = [join(1, 1, 1), commit(1, 2, 1, 9)].concat();
        let [request, _] = commit(1, 3, 1, 2);
        events.push(request);
        let answer = Answer::Committed { errors: vec![("t".into(), 0, 22)] };
        events.push(event(2, 1, What::Response { api: "OffsetCommit", correlation: 3, answer }));
        let findings = judge(&events);
        assert_eq!((findings.commits, findings.commits_accepted, findings.backwards.len()), (2, 1, 0));
    }
}
