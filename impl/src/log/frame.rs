//! The frame codec and the scan: how one record is laid out after the header (see the table
//! in `mod.rs`), and how the bytes after the indexed records are classified into complete
//! batches, a torn tail or damage. Pure functions of bytes: no files, no `LogError`.

use super::producer::{Producer, ProducerBatch};

/// crc32c, payload length, offset, producer id, producer epoch, sequence and batch length
/// precede the payload of every frame.
pub(super) const FRAME_HEAD: usize = 36;

/// The producer fields every frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FrameMeta {
    /// 0 for a plain append.
    producer: u64,
    epoch: u32,
    /// The batch's base sequence plus the record's index in the batch.
    sequence: u32,
    /// The number of records in the batch; at least 1.
    batch_len: u32,
}

impl FrameMeta {
    /// The fields of record `index` of a batch of `batch_len` records.
    pub(super) fn of(producer: Option<(Producer, u32)>, index: u32, batch_len: u32) -> FrameMeta {
        let (producer, base_sequence) = producer.unwrap_or((Producer { id: 0, epoch: 0 }, 0));
        FrameMeta {
            producer: producer.id,
            epoch: producer.epoch,
            sequence: base_sequence.wrapping_add(index),
            batch_len,
        }
    }

    /// The number of records of the frame's batch.
    pub(super) fn batch_len(&self) -> u32 {
        self.batch_len
    }
}

/// How a scan of the bytes after the indexed records ended.
pub(super) enum ScanEnd {
    /// Every byte belonged to a valid frame of a complete batch.
    Clean,
    /// A torn tail from `position` (absolute, the start of an incomplete batch) to `file_len`;
    /// `reason` says which frame ended the valid prefix and why.
    Torn { position: u64, file_len: u64, reason: String },
    /// Damage before the tail.
    Corrupt { offset: u64, position: u64, reason: String },
}

/// What one frame at a given position turned out to be.
pub(super) enum Frame {
    Valid { offset: u64, meta: FrameMeta, next: usize },
    Incomplete,
    BadChecksum,
}

/// The batch a scan has seen the first frames of, but not yet all of them.
struct OpenBatch {
    /// The fields of its first frame.
    first: FrameMeta,
    /// Byte position (relative to the scanned bytes) of its first frame.
    at: usize,
    /// Absolute byte positions of its frames seen so far.
    positions: Vec<u64>,
}

impl OpenBatch {
    /// Why a valid frame cannot be the next record of this batch, if it cannot.
    fn rejects(&self, meta: &FrameMeta) -> Option<String> {
        let first = &self.first;
        let seen = self.positions.len() as u32;
        let fits = meta.producer == first.producer
            && meta.epoch == first.epoch
            && meta.batch_len == first.batch_len
            && meta.sequence == first.sequence.wrapping_add(seen);
        (!fits).then(|| {
            format!(
                "the frame there does not continue the batch of {} begun {} before it",
                records(first.batch_len.into()),
                records(seen.into())
            )
        })
    }
}

/// `n` records, in words that agree in number: "1 record", "2 records".
pub(super) fn records(n: u64) -> String {
    if n == 1 {
        "1 record".to_string()
    } else {
        format!("{n} records")
    }
}

/// Scans `bytes` (which start at absolute byte `base`). Each complete batch of valid frames
/// with the next expected offsets has its frames' positions pushed onto `index` and, if it
/// came from an idempotent producer, is pushed onto `batches`. Returns how many bytes were
/// complete batches and how the scan ended.
pub(super) fn scan(
    bytes: &[u8],
    base: u64,
    index: &mut Vec<u64>,
    batches: &mut Vec<ProducerBatch>,
) -> (usize, ScanEnd) {
    let mut pos = 0;
    let mut open: Option<OpenBatch> = None;
    loop {
        let pending = open.as_ref().map_or(0, |batch| batch.positions.len());
        let expected = (index.len() + pending) as u64;
        let valid = open.as_ref().map_or(pos, |batch| batch.at);
        if pos == bytes.len() && open.is_none() {
            return (pos, ScanEnd::Clean);
        }
        let why = match parse_frame(bytes, pos) {
            _ if pos == bytes.len() => "the file ends inside a batch".to_string(),
            Frame::Valid { offset, meta, next } if offset == expected => {
                let rejected = match &open {
                    Some(batch) => batch.rejects(&meta),
                    None if meta.batch_len == 0 => Some("the frame there claims a batch of 0 records".into()),
                    None => None,
                };
                match rejected {
                    Some(why) => why,
                    None => {
                        let batch =
                            open.get_or_insert_with(|| OpenBatch { first: meta, at: pos, positions: Vec::new() });
                        batch.positions.push(base + pos as u64);
                        pos = next;
                        if batch.positions.len() == batch.first.batch_len as usize {
                            let done = open.take().expect("inserted above");
                            complete(done, index, batches);
                        }
                        continue;
                    }
                }
            }
            Frame::Valid { offset, .. } => format!("the frame there carries offset {offset}"),
            Frame::Incomplete => "the frame runs past the end of the file".to_string(),
            Frame::BadChecksum => "checksum mismatch".to_string(),
        };
        let end = match find_later_frame(bytes, pos, expected) {
            None => ScanEnd::Torn {
                position: base + valid as u64,
                file_len: base + bytes.len() as u64,
                reason: format!("record {expected} at byte {}: {why}", base + pos as u64),
            },
            Some((offset, at)) => ScanEnd::Corrupt {
                offset: expected,
                position: base + pos as u64,
                reason: format!("{why}, yet record {offset} follows intact at byte {}", base + at as u64),
            },
        };
        return (valid, end);
    }
}

/// Indexes a batch whose frames were all found and keeps it if it is idempotent.
fn complete(batch: OpenBatch, index: &mut Vec<u64>, batches: &mut Vec<ProducerBatch>) {
    let first = batch.first;
    if first.producer != 0 {
        batches.push(ProducerBatch {
            producer: Producer { id: first.producer, epoch: first.epoch },
            base_sequence: first.sequence,
            count: first.batch_len,
            first_offset: index.len() as u64,
        });
    }
    index.extend(batch.positions);
}

/// Looks, byte by byte from `from`, for a valid frame whose offset could follow `expected`:
/// above it, and no further above than the remaining bytes could hold frames. Such a frame
/// proves the damage is not a torn tail, because a crash only cuts the end of the last append.
fn find_later_frame(bytes: &[u8], from: usize, expected: u64) -> Option<(u64, usize)> {
    let limit = expected + ((bytes.len() - from) / FRAME_HEAD) as u64 + 1;
    (from..bytes.len()).find_map(|at| {
        let head = bytes.get(at..at + FRAME_HEAD)?;
        let offset = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if offset <= expected || offset > limit {
            return None;
        }
        match parse_frame(bytes, at) {
            Frame::Valid { offset, .. } => Some((offset, at)),
            _ => None,
        }
    })
}

/// Decodes and checks the frame at `pos` of `bytes`.
pub(super) fn parse_frame(bytes: &[u8], pos: usize) -> Frame {
    let rest = &bytes[pos..];
    if rest.len() < FRAME_HEAD {
        return Frame::Incomplete;
    }
    let u32_at = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
    let crc = u32_at(0);
    let len = u32_at(4) as usize;
    if rest.len() - FRAME_HEAD < len {
        return Frame::Incomplete;
    }
    let checked = &rest[4..FRAME_HEAD + len];
    if crc32c::crc32c(checked) != crc {
        return Frame::BadChecksum;
    }
    Frame::Valid {
        offset: u64_at(8),
        meta: FrameMeta { producer: u64_at(16), epoch: u32_at(24), sequence: u32_at(28), batch_len: u32_at(32) },
        next: pos + FRAME_HEAD + len,
    }
}

/// Appends the frame of one record to `out`.
pub(super) fn encode_frame(offset: u64, meta: FrameMeta, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len());
    assert!(len.is_ok(), "a log payload must fit the frame's u32 length field");
    let mut checked = Vec::with_capacity(FRAME_HEAD - 4 + payload.len());
    checked.extend_from_slice(&len.expect("checked above").to_le_bytes());
    checked.extend_from_slice(&offset.to_le_bytes());
    checked.extend_from_slice(&meta.producer.to_le_bytes());
    checked.extend_from_slice(&meta.epoch.to_le_bytes());
    checked.extend_from_slice(&meta.sequence.to_le_bytes());
    checked.extend_from_slice(&meta.batch_len.to_le_bytes());
    checked.extend_from_slice(payload);
    out.extend_from_slice(&crc32c::crc32c(&checked).to_le_bytes());
    out.extend_from_slice(&checked);
}

/// Issue 12's fuzz of the frame decoder (proptest inside `cargo test`, seeded, about a second):
/// whatever bytes follow a header, `parse_frame` at every position and `scan` neither panic,
/// and `scan` keeps to the bytes it was given; valid batches, damaged or cut at random, scan
/// to their intact prefix at least.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{RngAlgorithm, RngSeed};

    fn deterministic(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            failure_persistence: None,
            rng_algorithm: RngAlgorithm::ChaCha,
            rng_seed: RngSeed::Fixed(12),
            ..ProptestConfig::default()
        }
    }

    /// Scans `bytes` from `base`, checking what holds for any input: the complete prefix is
    /// within the bytes, every indexed position is inside it, and a torn tail or damage lies
    /// inside the bytes. Returns the prefix's length and how many records it indexed.
    fn scan_checked(bytes: &[u8], base: u64) -> (usize, usize) {
        for pos in 0..=bytes.len() {
            if let Frame::Valid { next, .. } = parse_frame(bytes, pos) {
                assert!(next > pos && next <= bytes.len(), "a frame at {pos} ends at {next} of {}", bytes.len());
            }
        }
        let (mut index, mut batches) = (Vec::new(), Vec::new());
        let (valid, end) = scan(bytes, base, &mut index, &mut batches);
        assert!(valid <= bytes.len());
        assert!(index.iter().all(|&at| at >= base && at < base + valid as u64), "{index:?} outside {valid}");
        let file_end = base + bytes.len() as u64;
        match end {
            ScanEnd::Clean => assert_eq!(valid, bytes.len()),
            ScanEnd::Torn { position, file_len, .. } => {
                assert_eq!((position, file_len), (base + valid as u64, file_end))
            }
            ScanEnd::Corrupt { position, .. } => assert!(position >= base + valid as u64 && position < file_end),
        }
        (valid, index.len())
    }

    /// Batches of 1 to 3 records with payloads of 0 to 24 bytes, plain or idempotent, encoded
    /// with consecutive offsets from 0; returns the bytes and the end of each batch.
    fn batches() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
        let batch = (1u32..=3, any::<bool>(), prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 3));
        prop::collection::vec(batch, 0..6).prop_map(|batches| {
            let (mut bytes, mut ends, mut offset) = (Vec::new(), Vec::new(), 0u64);
            for (len, idempotent, payloads) in batches {
                let producer = idempotent.then_some((crate::log::Producer { id: 7, epoch: 1 }, offset as u32));
                for index in 0..len {
                    encode_frame(offset, FrameMeta::of(producer, index, len), &payloads[index as usize], &mut bytes);
                    offset += 1;
                }
                ends.push(bytes.len());
            }
            (bytes, ends)
        })
    }

    proptest! {
        #![proptest_config(deterministic(2000))]

        #[test]
        fn any_bytes_scan_without_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), base in any::<u32>()) {
            scan_checked(&bytes, u64::from(base));
        }

        /// Valid batches scan clean and whole; with a byte changed or the file cut, the scan
        /// still keeps every batch that ends before the first changed byte.
        #[test]
        fn damaged_or_cut_batches_keep_their_intact_prefix(
            (bytes, ends) in batches(),
            edit in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            cut in any::<bool>(),
        ) {
            let batch_count = ends.len();
            prop_assert_eq!(scan_checked(&bytes, 0).0, bytes.len());
            prop_assume!(!bytes.is_empty());
            let at = edit.index(bytes.len());
            let mut damaged = bytes.clone();
            if cut {
                damaged.truncate(at);
            } else {
                damaged[at] ^= flip;
            }
            let (valid, _) = scan_checked(&damaged, 0);
            let intact = ends.iter().copied().filter(|&end| end <= at).max().unwrap_or(0);
            prop_assert!(valid >= intact, "kept {} bytes of an intact prefix of {} ({} batches)", valid, intact, batch_count);
        }
    }
}
