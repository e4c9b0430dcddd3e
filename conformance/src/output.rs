//! Every file conformance writes (the corpus of `regenerate`, the divergent traces of `test
//! --out`) goes through here: an output path that exists and is not a regular file (a device, a
//! directory, a FIFO), or an output directory that exists and is not one, is refused, never
//! replaced; a file is written to a temporary file beside it, synced, then renamed over it.

use crate::error::Error;
use std::io::Write;
use std::path::Path;

/// Creates `dir` (the value of `given`, e.g. "--out DIR"), refusing an existing non-directory.
pub fn prepare_dir(given: &str, dir: &Path) -> Result<(), Error> {
    if std::fs::metadata(dir).is_ok_and(|metadata| !metadata.is_dir()) {
        return Err(Error::NotReplaced { given: given.to_string(), path: dir.to_path_buf(), kind: "directory" });
    }
    std::fs::create_dir_all(dir).map_err(Error::io(dir, "create"))
}

/// Writes `contents` to `file` whole: a temporary `.NAME.PID.partial` beside it, synced, renamed
/// over it. An existing `file` that is not a regular file is refused (`given` names the flag).
pub fn write_file(given: &str, file: &Path, contents: &str) -> Result<(), Error> {
    if std::fs::metadata(file).is_ok_and(|metadata| !metadata.is_file()) {
        return Err(Error::NotReplaced { given: given.to_string(), path: file.to_path_buf(), kind: "regular file" });
    }
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = file.with_file_name(format!(".{name}.{}.partial", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut out| {
            out.write_all(contents.as_bytes())?;
            out.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, file));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(Error::io(file, "write")(error));
    }
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(directory) = std::fs::File::open(parent) {
            let _ = directory.sync_all();
        }
    }
    Ok(())
}
