//! The records of the output log (spec.md §10, transactions): a data record of a transaction,
//! or a marker that ends one (commit or abort). Each names its transaction in full: the
//! transactional id (group, input partition), the producer epoch (the partition row's epoch
//! when the transaction began) and the output offset of the transaction's first data record.
//!
//! Payload layout (little-endian): the 8-byte magic `ONCETXN1`, the kind (`D` data, `C` commit,
//! `A` abort), the epoch (i64), the input partition (u32), the first output offset (u64), the
//! group's length (u16) and its UTF-8 bytes, then for a data record the input offset (u64) and
//! the delta (i64), for a marker the input offsets it covers (u64 start, u64 end).

use super::TxnError;
use std::ops::Range;

const MAGIC: &[u8; 8] = b"ONCETXN1";
/// Magic, kind, epoch, partition, first output offset and the group's length.
const HEAD_LEN: usize = 8 + 1 + 8 + 4 + 8 + 2;
/// A group name longer than this cannot name a transactional id (its length is a u16).
pub const GROUP_BYTES_MAX: usize = u16::MAX as usize;

/// A transaction of the output log: the transactional id (`group`, `partition`), the producer
/// epoch, and the output offset of its first data record.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnKey {
    pub group: String,
    pub partition: u32,
    pub epoch: i64,
    pub first_output: u64,
}

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnEnd {
    Commit,
    Abort,
}

/// One record of the output log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputRecord {
    /// The output of input record `input_offset` (of partition `txn.partition`): its delta.
    Data { txn: TxnKey, input_offset: u64, delta: i64 },
    /// The end of transaction `txn`, whose data records carry the input records `input`.
    Marker { txn: TxnKey, end: TxnEnd, input: Range<u64> },
}

impl OutputRecord {
    /// The transaction the record belongs to (a marker: the one it ends).
    pub fn txn(&self) -> &TxnKey {
        match self {
            OutputRecord::Data { txn, .. } | OutputRecord::Marker { txn, .. } => txn,
        }
    }

    /// The record's payload in the output log.
    pub fn encode(&self) -> Result<Vec<u8>, TxnError> {
        let txn = self.txn();
        let group_len =
            u16::try_from(txn.group.len()).map_err(|_| TxnError::GroupTooLong { group_bytes: txn.group.len() })?;
        let kind = match self {
            OutputRecord::Data { .. } => b'D',
            OutputRecord::Marker { end: TxnEnd::Commit, .. } => b'C',
            OutputRecord::Marker { end: TxnEnd::Abort, .. } => b'A',
        };
        let mut out = Vec::with_capacity(HEAD_LEN + txn.group.len() + 16);
        out.extend_from_slice(MAGIC);
        out.push(kind);
        out.extend_from_slice(&txn.epoch.to_le_bytes());
        out.extend_from_slice(&txn.partition.to_le_bytes());
        out.extend_from_slice(&txn.first_output.to_le_bytes());
        out.extend_from_slice(&group_len.to_le_bytes());
        out.extend_from_slice(txn.group.as_bytes());
        match self {
            OutputRecord::Data { input_offset, delta, .. } => {
                out.extend_from_slice(&input_offset.to_le_bytes());
                out.extend_from_slice(&delta.to_le_bytes());
            }
            OutputRecord::Marker { input, .. } => {
                out.extend_from_slice(&input.start.to_le_bytes());
                out.extend_from_slice(&input.end.to_le_bytes());
            }
        }
        Ok(out)
    }

    /// Decodes a payload of the output log; `Err` says why it is not a transactional record.
    pub fn decode(payload: &[u8]) -> Result<OutputRecord, String> {
        let mut bytes = Bytes { rest: payload };
        if bytes.take(MAGIC.len())? != MAGIC {
            return Err("it does not start with ONCETXN1".to_string());
        }
        let kind = bytes.take(1)?[0];
        let epoch = i64::from_le_bytes(bytes.array()?);
        let partition = u32::from_le_bytes(bytes.array()?);
        let first_output = u64::from_le_bytes(bytes.array()?);
        let group_len = u16::from_le_bytes(bytes.array()?);
        let group = std::str::from_utf8(bytes.take(usize::from(group_len))?)
            .map_err(|_| "its group is not UTF-8".to_string())?
            .to_string();
        let txn = TxnKey { group, partition, epoch, first_output };
        let first = u64::from_le_bytes(bytes.array()?);
        let second: [u8; 8] = bytes.array()?;
        if !bytes.rest.is_empty() {
            return Err(format!("{} bytes follow the record", bytes.rest.len()));
        }
        let marker = |end| OutputRecord::Marker { txn: txn.clone(), end, input: first..u64::from_le_bytes(second) };
        match kind {
            b'D' => Ok(OutputRecord::Data { txn: txn.clone(), input_offset: first, delta: i64::from_le_bytes(second) }),
            b'C' => Ok(marker(TxnEnd::Commit)),
            b'A' => Ok(marker(TxnEnd::Abort)),
            other => Err(format!("its kind {other:#04x} is none of D, C, A")),
        }
    }
}

/// A cursor over a payload being decoded.
struct Bytes<'a> {
    rest: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        if self.rest.len() < count {
            return Err(format!("it ends {} bytes short", count - self.rest.len()));
        }
        let (taken, rest) = self.rest.split_at(count);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &str) -> TxnKey {
        TxnKey { group: group.to_string(), partition: 3, epoch: 7, first_output: 41 }
    }

    /// Every kind of record round-trips, and every cut of one, an extra byte, a flipped magic
    /// or an unknown kind is refused with a reason.
    #[test]
    fn records_round_trip_and_malformed_payloads_are_refused() {
        let records = [
            OutputRecord::Data { txn: key("g"), input_offset: 9, delta: -5 },
            OutputRecord::Marker { txn: key("group-é"), end: TxnEnd::Commit, input: 9..11 },
            OutputRecord::Marker { txn: key(""), end: TxnEnd::Abort, input: 0..1 },
        ];
        for record in records {
            let payload = record.encode().unwrap();
            assert_eq!(OutputRecord::decode(&payload), Ok(record.clone()));
            for cut in 0..payload.len() {
                assert!(OutputRecord::decode(&payload[..cut]).is_err(), "{record:?} cut at {cut}");
            }
            let mut longer = payload.clone();
            longer.push(0);
            assert!(OutputRecord::decode(&longer).is_err());
            let mut other_magic = payload.clone();
            other_magic[0] ^= 1;
            assert!(OutputRecord::decode(&other_magic).is_err());
            let mut other_kind = payload;
            other_kind[MAGIC.len()] = b'X';
            assert!(OutputRecord::decode(&other_kind).unwrap_err().contains("kind"));
        }
        // An input record's delta is no transactional record.
        assert!(OutputRecord::decode(&5i64.to_le_bytes()).is_err());
    }

    #[test]
    fn a_group_name_too_long_for_its_length_field_is_refused() {
        let long = OutputRecord::Data { txn: key(&"g".repeat(GROUP_BYTES_MAX + 1)), input_offset: 0, delta: 1 };
        assert!(
            matches!(long.encode(), Err(TxnError::GroupTooLong { group_bytes }) if group_bytes == GROUP_BYTES_MAX + 1)
        );
    }
}
