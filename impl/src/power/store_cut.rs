//! The store's commit under a power cut (`consumer power-cuts`' last table): the real store
//! (`SqliteStore`, DELETE journal) commits, and the power goes right after the COMMIT returns.
//!
//! In DELETE mode the commit *is* the journal's unlink; it survives a cut only once the
//! journal's directory is synced. SQLite says whether it syncs it: its VFS's `xDelete` gets
//! `syncDir`, 1 with `synchronous=EXTRA` and 0 with `FULL`. This module wraps the default VFS
//! (`onceproof-cut`, made the default once per process) so that an unlink asked with
//! `syncDir = 0` under a watched directory keeps the file's bytes: the cut then puts the file
//! back, as a file system that never made the unlink durable would. Everything else SQLite
//! synced is taken as durable (its data syncs are checked apart, from outside, by conformance's
//! power cuts). A commit is lost when the store reopened after the cut (SQLite rolls a hot
//! journal back) no longer holds it.
//!
//! Only the cut right after a commit is tried here: a later directory sync (the next
//! transaction's journal creation syncs it) would make an earlier unlink durable.

use super::PowerError;
use crate::log::LogIdentity;
use crate::store::{Journal, SqliteStore, StoreOptions, Synchronous};
use rusqlite::ffi;
use std::ffi::{c_char, c_int, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Commits cut per setting.
pub const COMMITS: u64 = 10;

/// One setting's commits, each cut right after it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreCutRow {
    pub synchronous: Synchronous,
    pub commits: u64,
    /// Commits the reopened store no longer held.
    pub lost: u64,
    /// Cuts that put the journal back (an unlink SQLite did not make durable).
    pub journals_back: u64,
}

impl StoreCutRow {
    /// The setting in SQLite's words.
    pub fn setting(&self) -> &'static str {
        match self.synchronous {
            Synchronous::Durable => "DELETE+EXTRA (the store's)",
            Synchronous::Full => "DELETE+FULL (the store's before)",
        }
    }
}

/// Unlinks asked without a directory sync, under the watched directories: path and bytes.
struct Watch {
    directories: Vec<PathBuf>,
    unsynced: Vec<(PathBuf, Vec<u8>)>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch { directories: Vec::new(), unsynced: Vec::new() });

fn watch() -> std::sync::MutexGuard<'static, Watch> {
    WATCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The default VFS this one wraps (SQLite's `unix`), once registered.
static BASE: OnceLock<usize> = OnceLock::new();

/// `xDelete` of the wrapper: an unlink under a watched directory asked with `sync_dir = 0`
/// keeps the file's bytes for the cut; then the base VFS deletes.
unsafe extern "C" fn delete(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    let base = *BASE.get().expect("registered before use") as *mut ffi::sqlite3_vfs;
    // SAFETY: SQLite passes a NUL-terminated path.
    let path = PathBuf::from(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned());
    {
        let mut watch = watch();
        if watch.directories.iter().any(|dir| path.starts_with(dir)) {
            watch.unsynced.retain(|(kept, _)| *kept != path);
            if sync_dir == 0 {
                if let Ok(bytes) = std::fs::read(&path) {
                    watch.unsynced.push((path.clone(), bytes));
                }
            }
        }
    }
    let _ = vfs;
    // SAFETY: the base VFS's own xDelete, called as SQLite would call it.
    unsafe { (*base).xDelete.expect("the unix VFS deletes")(base, name, sync_dir) }
}

/// Registers the wrapper as the process's default VFS (once).
fn register() -> Result<(), PowerError> {
    if BASE.get().is_some() {
        return Ok(());
    }
    // SAFETY: a NULL name finds the default VFS; the copy keeps every method and its app data
    // (the unix VFS's methods find their state through `pAppData`), only `xDelete` and the
    // name differ, and it lives for the whole process (leaked).
    unsafe {
        let base = ffi::sqlite3_vfs_find(std::ptr::null());
        if base.is_null() {
            return Err(PowerError::BadConfig("SQLite has no default VFS".into()));
        }
        let mut wrapper = *base;
        wrapper.zName = c"onceproof-cut".as_ptr();
        wrapper.xDelete = Some(delete);
        wrapper.pNext = std::ptr::null_mut();
        let wrapper = Box::leak(Box::new(wrapper));
        let _ = BASE.set(base as usize);
        if ffi::sqlite3_vfs_register(wrapper, 1) != ffi::SQLITE_OK {
            return Err(PowerError::BadConfig("SQLite refused the power-cut VFS".into()));
        }
    }
    Ok(())
}

/// Cuts `COMMITS` commits of the real store with `synchronous`, in a fresh directory under
/// `work`: each commit a claim (the epoch bumped), the cut right after it, the store reopened.
pub fn run_setting(synchronous: Synchronous, work: &Path) -> Result<StoreCutRow, PowerError> {
    register()?;
    let dir = work.join(format!("store-cut-{synchronous:?}"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PowerError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let dir = dir.canonicalize().map_err(io(&dir))?;
    watch().directories.push(dir.clone());
    let result = cut_commits(synchronous, &dir);
    watch().directories.retain(|watched| *watched != dir);
    std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    result
}

fn cut_commits(synchronous: Synchronous, dir: &Path) -> Result<StoreCutRow, PowerError> {
    let path = dir.join("store.db");
    let options = StoreOptions { journal: Journal::Delete, synchronous, ..StoreOptions::default() };
    let mut store = SqliteStore::create(&path, LogIdentity { id: 1, partitions: 1 }, options)?;
    store.ensure_group("g", "o0")?;
    let mut row = StoreCutRow { synchronous, commits: COMMITS, lost: 0, journals_back: 0 };
    for _ in 0..COMMITS {
        let before = store.progress("g", 0)?.epoch;
        watch().unsynced.clear();
        let committed = store.claim("g", 0, "o0")?;
        assert_eq!(committed, before + 1, "a claim bumps the epoch by one");
        drop(store);
        // The cut: an unlink SQLite did not make durable comes back.
        for (file, bytes) in std::mem::take(&mut watch().unsynced) {
            std::fs::write(&file, bytes).map_err(|source| PowerError::Io { path: file.clone(), source })?;
            row.journals_back += 1;
        }
        store = SqliteStore::open(&path, options)?;
        let after = store.progress("g", 0)?.epoch;
        match after {
            epoch if epoch == committed => {}
            epoch if epoch == before => row.lost += 1,
            epoch => {
                let what = format!("a cut left epoch {epoch}, neither {before} nor the committed {committed}");
                return Err(PowerError::BadConfig(what));
            }
        }
    }
    Ok(row)
}

/// Both settings: the store's, which must lose none, and the one before, whose losses show
/// that the cut strikes.
pub fn run(work: &Path) -> Result<Vec<StoreCutRow>, PowerError> {
    [Synchronous::Full, Synchronous::Durable].into_iter().map(|synchronous| run_setting(synchronous, work)).collect()
}

/// The table, one line per setting, and what it establishes.
pub fn table(rows: &[StoreCutRow]) -> String {
    let mut text = String::from("store commits cut right after they returned (DELETE journal)\n");
    text.push_str(&format!("{:<34} {:>7} {:>13} {:>5}\n", "setting", "commits", "journals back", "lost"));
    for row in rows {
        text.push_str(&format!("{:<34} {:>7} {:>13} {:>5}\n", row.setting(), row.commits, row.journals_back, row.lost));
    }
    text
}

/// What is wrong with the rows: the store's setting lost a commit, or the cut never struck
/// (the setting before lost none, so nothing was shown).
pub fn violations(rows: &[StoreCutRow]) -> Vec<String> {
    let mut found = Vec::new();
    for row in rows {
        match row.synchronous {
            Synchronous::Durable if row.lost > 0 => found.push(format!(
                "{}: {} of {} commits lost to a cut right after them",
                row.setting(),
                row.lost,
                row.commits
            )),
            Synchronous::Full if row.lost == 0 => found.push(format!(
                "{}: no commit lost, so the cut never struck and the store's row shows nothing",
                row.setting()
            )),
            Synchronous::Durable | Synchronous::Full => {}
        }
    }
    found
}
