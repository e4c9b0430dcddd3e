//! The partition file's 8-byte header: the log format and its version. A leaf of `log`.

/// The first bytes of every partition file; anything else is not ours to touch.
pub(super) const MAGIC: &[u8; 8] = b"ONCELOG2";
/// What every header of this log format starts with, whatever its version.
const MAGIC_FAMILY: &[u8; 7] = b"ONCELOG";
/// Byte position of the first frame.
pub(super) const HEADER_LEN: u64 = MAGIC.len() as u64;

/// Whether a refused header is this log format's header of another version.
pub(super) fn is_other_version(found: &[u8]) -> bool {
    found.len() == MAGIC.len() && found.starts_with(MAGIC_FAMILY)
}
