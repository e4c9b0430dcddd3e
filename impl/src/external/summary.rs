//! What `consumer status` shows of a group's external systems (spec.md §3.4, §10 "External
//! effects and dual writes"): how the provider answered the group's emails, and whether the
//! index holds exactly the store's facts. These are the observations the rows' properties are
//! about: `external-exactly-once` (every record below the committed next offset delivered once)
//! and `stores-agree` (the index holds the store's facts once the relay is done).

use super::{EmailProvider, ExternalDir, ExternalError, Index};
use crate::store::{Fact, Store};
use serde::Serialize;
use std::collections::BTreeMap;

/// The group's emails, as the provider recorded them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EmailSummary {
    /// Requests received for the group's records.
    pub requests: u64,
    /// Requests delivered (the others were dropped as repeats of a delivered key).
    pub delivered: u64,
    pub dropped: u64,
    /// Records whose email was delivered more than once (a replay without a key).
    pub duplicated: u64,
    /// Records below the group's committed next offsets whose email was never delivered (a
    /// crash between the store's commit and the email).
    pub never_delivered: u64,
}

/// The group's facts in the store, in its outbox and in the index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IndexSummary {
    pub store: u64,
    pub outbox: u64,
    pub index: u64,
    /// Facts of the store that the index lacks and no outbox row will bring: lost for good.
    pub lost: u64,
    /// The index holds exactly the store's facts.
    pub agree: bool,
}

/// A group's external systems: `None` where the group used none (no request, no fact) or the
/// data directory has no such file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupExternals {
    pub emails: Option<EmailSummary>,
    pub index: Option<IndexSummary>,
}

/// Summarises `group`'s external systems in `dir` against `store`.
pub fn summarize(store: &Store, dir: &ExternalDir, group: &str) -> Result<GroupExternals, ExternalError> {
    let emails = match optional(dir.open_provider())? {
        Some(provider) => email_summary(store, &provider, group)?,
        None => None,
    };
    let index = match optional(dir.open_index())? {
        Some(index) => index_summary(store, &index, group)?,
        None => None,
    };
    Ok(GroupExternals { emails, index })
}

/// A missing file is no system (a data directory from before them); any other error is one.
fn optional<T>(opened: Result<T, ExternalError>) -> Result<Option<T>, ExternalError> {
    match opened {
        Ok(system) => Ok(Some(system)),
        Err(ExternalError::Missing { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

fn email_summary(store: &Store, provider: &EmailProvider, group: &str) -> Result<Option<EmailSummary>, ExternalError> {
    let received = provider.received(Some(group))?;
    if received.is_empty() {
        return Ok(None);
    }
    let mut deliveries: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for request in &received {
        *deliveries.entry((request.partition, request.offset)).or_default() += u64::from(request.delivered);
    }
    let delivered: u64 = deliveries.values().sum();
    let duplicated = deliveries.values().filter(|&&count| count > 1).count() as u64;
    let mut never_delivered = 0;
    for partition in 0..store.partitions() {
        let next_offset = store.progress(group, partition)?.next_offset;
        let emailed = deliveries.range((partition, 0)..(partition, next_offset)).filter(|(_, &n)| n > 0).count();
        never_delivered += next_offset - emailed as u64;
    }
    let requests = received.len() as u64;
    Ok(Some(EmailSummary { requests, delivered, dropped: requests - delivered, duplicated, never_delivered }))
}

fn index_summary(store: &Store, index: &Index, group: &str) -> Result<Option<IndexSummary>, ExternalError> {
    let (facts, outbox, indexed) = (store.facts(Some(group))?, store.outbox(Some(group))?, index.facts(Some(group))?);
    if facts.is_empty() && outbox.is_empty() && indexed.is_empty() {
        return Ok(None);
    }
    let lacking: Vec<&Fact> = facts.iter().filter(|fact| indexed.binary_search(fact).is_err()).collect();
    let lost = lacking.iter().filter(|fact| outbox.binary_search(fact).is_err()).count() as u64;
    Ok(Some(IndexSummary {
        store: facts.len() as u64,
        outbox: outbox.len() as u64,
        index: indexed.len() as u64,
        lost,
        agree: facts == indexed,
    }))
}
