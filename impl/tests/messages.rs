//! The owner's error messages at the boundaries that choose between them: a table of errors
//! in, the message each must print out. (A message names the cause and the way out, so the
//! wrong one sends an operator the wrong way: `consumer repair` for a store that is not ahead
//! of its log would remove nothing that explains the refusal.)

use consumer::owner::OwnerError;

fn refused(stored: u64, position: u64, end: u64) -> OwnerError {
    OwnerError::Refused { group: "g".to_string(), partition: 0, stored, position, end }
}

/// Past the log end: the store (or the position) is ahead of the log. At or within it: only
/// `--log-check refuse-all` refuses, for a loss behind the position.
const AHEAD: &str = "is past the log end";
const BEHIND: &str = "--log-check refuse-all refuses behind the loss too";

#[test]
fn a_refusal_names_a_store_ahead_only_past_the_log_end() {
    let cases = [
        (refused(4, 3, 3), AHEAD),
        (refused(3, 4, 3), AHEAD),
        (refused(3, 3, 3), BEHIND),
        (refused(2, 3, 3), BEHIND),
        (refused(3, 2, 3), BEHIND),
        (refused(0, 0, 0), BEHIND),
    ];
    for (error, expected) in cases {
        let message = error.to_string();
        assert!(message.contains(expected), "{error:?}: {message}");
        let other = if expected == AHEAD { BEHIND } else { AHEAD };
        assert!(!message.contains(other), "{error:?}: {message}");
        assert_eq!(message.lines().count(), 1, "{error:?}: one line: {message}");
    }
}
