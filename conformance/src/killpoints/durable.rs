//! What a power cut leaves of the store, from the syncs the tracer saw (as ALICE and
//! CrashMonkey model a file system): a file's content counts as of its last `fsync` or
//! `fdatasync` (or a write through a descriptor opened `O_SYNC` or `O_DSYNC`), and a
//! directory's entries (a creation, rename or unlink) as of its own last sync; `sync` and
//! `syncfs` make everything durable. A power cut is taken to lose *every* change not made
//! durable so: one state among those a real cut can leave (which keeps any subset of the
//! unsynced changes); the others are not tried.
//!
//! The store as the harness hands it over (set up, before any owner starts) is taken as
//! durable. One `Durability` is shared by every traced process of a store: a change one
//! process made and none synced is lost by a cut during another's step too.

use super::{Entry, Scope, Snapshot, SNAPSHOT_BYTES_MAX};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The durable view of one store, shared by its tracers and the harness.
#[derive(Clone)]
pub struct Durability(Arc<Mutex<Durable>>);

impl fmt::Debug for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Durability")
    }
}

/// A directory entry as of its directory's last sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Named {
    inode: u64,
    directory: bool,
}

struct Durable {
    root: PathBuf,
    prefix: Option<String>,
    /// Per directory under the root (relative; empty: the root), its entries as of its last sync.
    names: BTreeMap<PathBuf, BTreeMap<OsString, Named>>,
    /// Per inode, a file's content as of its last sync.
    data: BTreeMap<u64, Vec<u8>>,
    /// Syncs seen under the store.
    syncs: u64,
    /// The state a cut leaves now, kept until the next sync changes it.
    cut: Option<Arc<Snapshot>>,
}

impl Durability {
    /// The store under `scope` as it is now, taken as durable.
    pub fn baseline(scope: &Scope) -> io::Result<Durability> {
        let mut durable = Durable {
            root: scope.root.clone(),
            prefix: scope.prefix.clone(),
            names: BTreeMap::new(),
            data: BTreeMap::new(),
            syncs: 0,
            cut: None,
        };
        durable.everything()?;
        Ok(Durability(Arc::new(Mutex::new(durable))))
    }

    fn lock(&self) -> MutexGuard<'_, Durable> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A sync of `path` (absolute: a file's content, or a directory's entries) completed;
    /// `open` is where it is read (a process's `/proc/PID/fd/N`: an unlinked file too).
    pub fn synced(&self, path: &Path, open: &Path) -> io::Result<()> {
        let mut durable = self.lock();
        durable.syncs += 1;
        durable.cut = None;
        let meta = match std::fs::metadata(open) {
            Ok(meta) => meta,
            // Closed meanwhile by another thread of the process: nothing to read.
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        if meta.is_dir() {
            let relative = path.strip_prefix(&durable.root).map(Path::to_path_buf).unwrap_or_default();
            let entries = list(open)?;
            durable.names.insert(relative, entries);
        } else if meta.is_file() {
            if meta.len() > SNAPSHOT_BYTES_MAX {
                return Err(too_large());
            }
            let content = std::fs::read(open)?;
            durable.data.insert(meta.ino(), content);
        }
        Ok(())
    }

    /// A `sync` or `syncfs` completed: everything under the store is durable.
    pub fn synced_all(&self) -> io::Result<()> {
        let mut durable = self.lock();
        durable.syncs += 1;
        durable.everything()
    }

    /// Takes everything under the store as durable now, as a sync of all would, but not
    /// counted as one: a write of onceproof's own (the coordinator's claim).
    pub fn assume_durable(&self) -> io::Result<()> {
        self.lock().everything()
    }

    /// The store a power cut now leaves.
    pub fn cut(&self) -> Arc<Snapshot> {
        let mut durable = self.lock();
        if let Some(cut) = &durable.cut {
            return Arc::clone(cut);
        }
        let cut = Arc::new(durable.snapshot());
        durable.cut = Some(Arc::clone(&cut));
        cut
    }

    /// Syncs seen under the store so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }
}

impl Durable {
    /// Takes the store as it is now as durable: every directory's entries and file's content.
    fn everything(&mut self) -> io::Result<()> {
        self.cut = None;
        self.names.clear();
        self.data.clear();
        let mut bytes = 0u64;
        let mut pending = vec![PathBuf::new()];
        while let Some(relative) = pending.pop() {
            let dir = self.root.join(&relative);
            let entries = list(&dir)?;
            for (name, named) in &entries {
                if relative.as_os_str().is_empty() && !self.in_scope(name) {
                    continue;
                }
                let path = relative.join(name);
                if named.directory {
                    pending.push(path);
                } else {
                    let content = std::fs::read(self.root.join(&path))?;
                    bytes += content.len() as u64;
                    if bytes > SNAPSHOT_BYTES_MAX {
                        return Err(too_large());
                    }
                    self.data.insert(named.inode, content);
                }
            }
            self.names.insert(relative, entries);
        }
        Ok(())
    }

    fn in_scope(&self, name: &OsString) -> bool {
        self.prefix.as_ref().is_none_or(|prefix| name.to_string_lossy().starts_with(prefix.as_str()))
    }

    /// The durable entries from the root down, each file with its durable content (none
    /// synced since it was made: empty).
    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        let mut pending = vec![PathBuf::new()];
        while let Some(relative) = pending.pop() {
            let Some(entries) = self.names.get(&relative) else { continue };
            for (name, named) in entries {
                if relative.as_os_str().is_empty() && !self.in_scope(name) {
                    continue;
                }
                let path = relative.join(name);
                if named.directory {
                    snapshot.entries.insert(path.clone(), Entry::Directory);
                    pending.push(path);
                } else {
                    let content = self.data.get(&named.inode).cloned().unwrap_or_default();
                    snapshot.entries.insert(path, Entry::File(content));
                }
            }
        }
        snapshot
    }
}

/// A directory's entries now: name, inode and whether it is a directory (other kinds are
/// taken as files; a copy of the store refuses them anyway).
fn list(dir: &Path) -> io::Result<BTreeMap<OsString, Named>> {
    let mut entries = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        entries.insert(entry.file_name(), Named { inode: meta.ino(), directory: meta.is_dir() });
    }
    Ok(entries)
}

fn too_large() -> io::Error {
    io::Error::other(format!(
        "the store holds more than {SNAPSHOT_BYTES_MAX} bytes: too large to copy at every kill point"
    ))
}

#[cfg(test)]
mod tests {
    use super::{Durability, Entry, Scope};
    use std::path::Path;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("written");
    }

    /// A cut keeps a file's content as of its last sync and a directory's entries as of the
    /// directory's: a table of what is done after the baseline, and what a cut then leaves.
    #[test]
    fn a_cut_keeps_what_was_synced_and_nothing_else() {
        type Do = fn(&Path, &Durability);
        type Case = (&'static str, Do, &'static [(&'static str, &'static str)]);
        let table: [Case; 5] = [
            ("written, unsynced", |d, _| write(d, "a", "new"), &[("a", "old")]),
            (
                "written, synced",
                |d, s| {
                    write(d, "a", "new");
                    s.synced(&d.join("a"), &d.join("a")).expect("synced");
                },
                &[("a", "new")],
            ),
            (
                "made and synced, directory not",
                |d, s| {
                    write(d, "b", "b");
                    s.synced(&d.join("b"), &d.join("b")).expect("synced");
                },
                &[("a", "old")],
            ),
            (
                "made, synced, directory synced",
                |d, s| {
                    write(d, "b", "b");
                    s.synced(&d.join("b"), &d.join("b")).expect("synced");
                    s.synced(d, d).expect("synced");
                },
                &[("a", "old"), ("b", "b")],
            ),
            (
                "unlinked, directory synced",
                |d, s| {
                    std::fs::remove_file(d.join("a")).expect("removed");
                    s.synced(d, d).expect("synced");
                },
                &[],
            ),
        ];
        for (case, act, left) in table {
            let dir = tempfile::tempdir().expect("a directory");
            let root = dir.path().canonicalize().expect("canonical");
            write(&root, "a", "old");
            let durability = Durability::baseline(&Scope::directory(&root).expect("a scope")).expect("a baseline");
            act(&root, &durability);
            let cut = durability.cut();
            let shown: Vec<(String, String)> = cut
                .entries
                .iter()
                .map(|(path, entry)| match entry {
                    Entry::File(content) => (path.display().to_string(), String::from_utf8_lossy(content).into_owned()),
                    Entry::Directory => (path.display().to_string(), "/".to_string()),
                })
                .collect();
            let expected: Vec<(String, String)> = left.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect();
            assert_eq!(shown, expected, "{case}");
        }
    }
}
