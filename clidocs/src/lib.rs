//! Shell completions and man pages of the workspace's three binaries (`model`, `consumer`,
//! `conformance`), made from each one's clap definition: `BIN completions SHELL` prints a
//! completion script, `BIN man DIR` writes one man page per command (`BIN.1`, `BIN-SUB.1`).
//! A crate of its own so that `model` and `consumer`, which never depend on each other, share
//! it.

use clap::{Args, Command};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// `BIN completions SHELL`'s arguments.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `BIN man DIR`'s arguments.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// The directory the pages go to (made if missing); a page already there is replaced.
    pub dir: PathBuf,
}

/// The completion script of `command` (the binary `bin`) for `shell`.
pub fn completions(mut command: Command, bin: &str, shell: Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, bin, &mut script);
    String::from_utf8(script).expect("clap_complete writes UTF-8")
}

/// One man page per command: `command` itself as `BIN.1`, and every subcommand it does not
/// hide as `BIN-SUB.1`, in the order the help lists them.
pub fn man_pages(command: Command) -> Vec<(String, Vec<u8>)> {
    let mut command = command;
    command.build();
    let bin = command.get_name().to_string();
    // Every page names the binary and its version as its source (the footer).
    let source = format!("{bin} {}", command.get_version().unwrap_or_default());
    let mut pages = vec![(format!("{bin}.1"), render(&command, &bin, &source))];
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set() && sub.get_name() != "help") {
        let name = format!("{bin}-{}", sub.get_name());
        let page = sub.clone().display_name(name.clone()).bin_name(format!("{bin} {}", sub.get_name()));
        pages.push((format!("{name}.1"), render(&page, &name, &source)));
    }
    pages
}

fn render(command: &Command, title: &str, source: &str) -> Vec<u8> {
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(command.clone()).title(title.to_string()).source(source.to_string());
    man.render(&mut page).expect("a page renders into memory");
    page
}

/// `BIN man DIR`: `command`'s pages written into `dir`; the line that says so.
pub fn man(command: Command, dir: &Path) -> Result<String, ManError> {
    let written = write_pages(dir, &man_pages(command))?;
    Ok(format!("wrote {} man pages to {}", written.len(), dir.display()))
}

/// Writes `pages` into `dir`, each through a temporary file renamed over it, so that a page is
/// whole or absent; returns their paths.
pub fn write_pages(dir: &Path, pages: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>, ManError> {
    if std::fs::metadata(dir).is_ok_and(|metadata| !metadata.is_dir()) {
        return Err(ManError { path: dir.to_path_buf(), what: "write into", error: None });
    }
    std::fs::create_dir_all(dir).map_err(|error| ManError::io(dir, "create", error))?;
    let mut written = Vec::with_capacity(pages.len());
    for (name, page) in pages {
        let path = dir.join(name);
        let partial = dir.join(format!(".{name}.{}.partial", std::process::id()));
        let result = std::fs::File::create(&partial)
            .and_then(|mut file| file.write_all(page).and_then(|()| file.sync_all()))
            .and_then(|()| std::fs::rename(&partial, &path));
        if let Err(error) = result {
            let _ = std::fs::remove_file(&partial);
            return Err(ManError::io(&path, "write", error));
        }
        written.push(path);
    }
    Ok(written)
}

/// A man page that could not be written: the path, what was tried, and why.
#[derive(Debug)]
pub struct ManError {
    pub path: PathBuf,
    pub what: &'static str,
    pub error: Option<std::io::Error>,
}

impl ManError {
    fn io(path: &Path, what: &'static str, error: std::io::Error) -> ManError {
        ManError { path: path.to_path_buf(), what, error: Some(error) }
    }
}

impl fmt::Display for ManError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            Some(error) => write!(f, "cannot {} {}: {error}", self.what, self.path.display()),
            None => write!(f, "cannot write man pages into {}: it is not a directory", self.path.display()),
        }
    }
}

impl std::error::Error for ManError {}
