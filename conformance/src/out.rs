//! The command line's output. Every line a command prints goes through here (`outln!` on
//! stdout, `errln!` on stderr), so a failed write (a closed pipe, a full disk, an I/O
//! error) is an `OutputError` the command returns with `?`, never a panic. `main` flushes
//! stdout before it returns (`flush`) and maps an `OutputError` anywhere in the error's chain
//! to `OUTPUT_EXIT_CODE` with one line on stderr (`report`), where stderr can still be
//! written. The model, the consumer and conformance each have this module.

use std::fmt;
use std::io::{self, Write};

/// The exit status of a command whose output could not be written (docs/errors.md "Exit codes"): the
/// work before the failed write is done, none after it.
pub const OUTPUT_EXIT_CODE: u8 = 5;

/// A write to stdout or stderr that failed.
#[derive(Debug)]
pub struct OutputError {
    stream: &'static str,
    source: io::Error,
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write to {}: {}", self.stream, self.source)
    }
}

impl std::error::Error for OutputError {}

const STDOUT: &str = "standard output";
const STDERR: &str = "standard error";

/// `args` and a newline on stdout (`outln!`).
pub fn line(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .map_err(|source| OutputError { stream: STDOUT, source })
}

/// `args` on stdout, no newline: a part of a document written as it is made (`document`).
pub fn part(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    io::stdout().lock().write_fmt(args).map_err(|source| OutputError { stream: STDOUT, source })
}

/// `args` and a newline on stderr (`errln!`).
pub fn error_line(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    let mut stderr = io::stderr().lock();
    stderr
        .write_fmt(args)
        .and_then(|()| stderr.write_all(b"\n"))
        .map_err(|source| OutputError { stream: STDERR, source })
}

/// Flushes stdout: what is still buffered (a line without its newline) is written now, and
/// its failure caught, rather than dropped at exit.
pub fn flush() -> Result<(), OutputError> {
    io::stdout().flush().map_err(|source| OutputError { stream: STDOUT, source })
}

/// Lines a library function hands to a callback that cannot fail (`&mut |line| ...`): each
/// printed with `outln!` until one fails; after that nothing more is printed, and `finish`
/// returns the failure once the library function has returned.
#[derive(Default)]
pub struct Lines {
    failed: Option<OutputError>,
}

impl Lines {
    /// `line` and a newline on stdout, unless a line failed already.
    pub fn print(&mut self, line: &str) {
        if self.failed.is_none() {
            self.failed = line_result(line).err();
        }
    }

    /// The first failure, if any.
    pub fn finish(self) -> Result<(), OutputError> {
        self.failed.map_or(Ok(()), Err)
    }
}

fn line_result(text: &str) -> Result<(), OutputError> {
    line(format_args!("{text}"))
}

/// The output failure in `error`'s chain, if any.
pub fn find(error: &anyhow::Error) -> Option<&OutputError> {
    error.chain().find_map(|cause| cause.downcast_ref::<OutputError>())
}

/// Reports a failed output on one line of stderr, if stderr can still be written, and gives
/// the exit status.
pub fn report(error: &OutputError) -> u8 {
    let _ = error_line(format_args!("error: {error}; the work before it is done"));
    OUTPUT_EXIT_CODE
}

/// `println!` that returns an `OutputError` instead of panicking.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

/// `eprintln!` that returns an `OutputError` instead of panicking.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::error_line(format_args!($($arg)*))
    };
}
