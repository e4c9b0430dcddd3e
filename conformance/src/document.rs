//! A conformance JSON document (spec.md §11, "JSON output") written as it is made: its head,
//! then each trace's record as that replay ends, then the totals. `test` may replay millions
//! of paths; this holds one record at a time, not all of them, and the document is still one
//! line of JSON on stdout.

use crate::out::{self, OutputError};
use serde_json::Value;

/// An open document: its head is written, its `traces` array is open.
pub struct Stream {
    written: usize,
    /// The first record that could not be written: records are handed over from a callback
    /// that cannot fail, so the failure waits for `finish`.
    failed: Option<OutputError>,
}

impl Stream {
    /// Writes the fields of `head` (a non-empty object) and opens `traces`.
    pub fn start(head: &Value) -> Result<Self, OutputError> {
        let head = object_text(head);
        // Everything but the object's closing brace, so that `traces` continues it.
        out::part(format_args!("{},\"traces\":[", &head[..head.len() - 1]))?;
        Ok(Stream { written: 0, failed: None })
    }

    /// One trace's record; after a failed write nothing more is written.
    pub fn trace(&mut self, record: &Value) {
        if self.failed.is_some() {
            return;
        }
        let comma = if self.written == 0 { "" } else { "," };
        self.failed = out::part(format_args!("{comma}{record}")).err();
        self.written += 1;
    }

    /// Closes `traces`, writes the fields of `tail` (a non-empty object) and ends the line.
    pub fn finish(self, tail: &Value) -> Result<(), OutputError> {
        if let Some(failed) = self.failed {
            return Err(failed);
        }
        let tail = object_text(tail);
        // Everything but the object's opening brace: its fields follow the array.
        out::line(format_args!("],{}", &tail[1..]))
    }
}

/// `value`, which the callers build with `json!({...})` and at least one field, as text.
fn object_text(value: &Value) -> String {
    debug_assert!(value.as_object().is_some_and(|fields| !fields.is_empty()), "not a non-empty object: {value}");
    value.to_string()
}
