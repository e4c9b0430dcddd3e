//! `consumer serve`, this consumer's side of the open owner protocol (PROTOCOL.md): a table of
//! request lines in, the reply lines (and exit status) out. Bad input gets one `error` reply
//! naming the problem, and serving goes on; an `init` that cannot be served ends the process
//! with exit status 2 after its error reply.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

struct Case {
    name: &'static str,
    /// Request lines; `STORE` and `LOG` stand for the directories of a fresh data directory.
    requests: &'static [&'static str],
    /// One fragment per reply line, in order.
    replies: &'static [&'static str],
    code: i32,
}

const STORE_INIT: &str = r#"{"id":1,"type":"init","protocol":1,"role":"store","store":"STORE","log":"LOG","partitions":1,"strategy":"atomic-fenced","row":"atomic-fenced","settings":{"commit_every":2,"inflight":2,"max_attempts":2,"on_out_of_range":"fail","log_check":"refuse-ahead"}}"#;

const CASES: &[Case] = &[
    Case {
        name: "the store role sets a group up, claims and observes",
        requests: &[
            STORE_INIT,
            r#"{"id":2,"type":"setup","group":"g0","owner":"o0"}"#,
            r#"{"id":3,"type":"claim","group":"g0","partition":0,"owner":"o1"}"#,
            r#"{"id":4,"type":"observe","group":"g0"}"#,
            r#"{"id":5,"type":"quit"}"#,
        ],
        replies: &[
            r#"{"in_reply_to":1,"type":"init_ok","protocol":1}"#,
            r#"{"in_reply_to":2,"type":"setup_ok"}"#,
            r#"{"in_reply_to":3,"type":"claim_ok","epoch":2}"#,
            r#"{"in_reply_to":4,"type":"observe_ok","total":0,"partitions":[{"next_offset":0,"epoch":2,"owner":"o1","stamp":null}],"processed":[],"attempts":[],"dead_letters":[],"resets":[],"value":null,"facts":[],"outbox":[]}"#,
            r#"{"in_reply_to":5,"type":"quit_ok"}"#,
        ],
        code: 0,
    },
    Case {
        name: "a line that is not JSON, a request without an id, before init, of another role",
        requests: &[
            "not json",
            r#"{"type":"leases"}"#,
            r#"{"id":7,"type":"leases"}"#,
            STORE_INIT,
            r#"{"id":8,"type":"leases"}"#,
            r#"{"id":9,"type":"teleport"}"#,
            r#"{"id":10,"type":"init","protocol":1}"#,
        ],
        replies: &[
            r#"{"type":"error","code":"malformed","definite":true,"text":"not a JSON object: "#,
            r#"{"type":"error","code":"malformed","definite":true,"text":"a request without an id"}"#,
            r#"{"in_reply_to":7,"type":"error","code":"malformed","definite":true,"text":"'leases' before init: the first request must be init"}"#,
            r#""type":"init_ok""#,
            r#"{"in_reply_to":8,"type":"error","code":"malformed","definite":true,"text":"'leases' is no request of the store role"}"#,
            r#"{"in_reply_to":9,"type":"error","code":"malformed","definite":true,"text":"not a request of version 1: unknown variant `teleport`"#,
            r#"{"in_reply_to":10,"type":"error","code":"malformed","definite":true,"text":"not a request of version 1: "#,
        ],
        code: 0,
    },
    Case {
        name: "a malformed init (fields missing) ends the process",
        requests: &[r#"{"id":1,"type":"init","protocol":1}"#, r#"{"id":2,"type":"quit"}"#],
        replies: &[
            r#"{"in_reply_to":1,"type":"error","code":"malformed","definite":true,"text":"not a request of version 1: "#,
        ],
        code: 2,
    },
    Case {
        name: "an init of a role that does not exist ends the process",
        requests: &[r#"{"id":1,"type":"init","protocol":1,"role":"broker"}"#, STORE_INIT],
        replies: &[
            r#"{"in_reply_to":1,"type":"error","code":"malformed","definite":true,"text":"not a request of version 1: "#,
        ],
        code: 2,
    },
    Case {
        name: "another protocol version ends the process",
        requests: &[
            r#"{"id":1,"type":"init","protocol":2,"role":"store","store":"STORE","log":"LOG","partitions":1,"strategy":"atomic-fenced","row":"atomic-fenced","settings":{"commit_every":2,"inflight":2,"max_attempts":2,"on_out_of_range":"fail","log_check":"refuse-ahead"}}"#,
            r#"{"id":2,"type":"quit"}"#,
        ],
        replies: &[
            r#"{"in_reply_to":1,"type":"error","code":"not-supported","definite":true,"text":"protocol version 2 (this consumer speaks 1)"}"#,
        ],
        code: 2,
    },
    Case {
        name: "an owner of a strategy this consumer does not have ends the process",
        requests: &[
            r#"{"id":1,"type":"init","protocol":1,"role":"owner","group":"g0","owner":"o0","start":"claim","store":"STORE","log":"LOG","partitions":1,"strategy":"exactly-twice","row":"exactly-twice","settings":{"commit_every":2,"inflight":2,"max_attempts":2,"on_out_of_range":"fail","log_check":"refuse-ahead"}}"#,
        ],
        replies: &[
            r#"{"in_reply_to":1,"type":"error","code":"not-supported","definite":true,"text":"strategy 'exactly-twice'"}"#,
        ],
        code: 2,
    },
    Case {
        name: "an owner without a store refuses to start",
        requests: &[
            r#"{"id":1,"type":"init","protocol":1,"role":"owner","group":"g0","owner":"o0","start":"claim","store":"STORE","log":"LOG","partitions":1,"strategy":"atomic-fenced","row":"atomic-fenced","settings":{"commit_every":2,"inflight":2,"max_attempts":2,"on_out_of_range":"fail","log_check":"refuse-ahead"}}"#,
        ],
        replies: &[r#"{"in_reply_to":1,"type":"error","code":"storage","definite":false,"text":"#],
        code: 2,
    },
];

#[test]
fn consumer_serve_answers_each_request_line_as_the_protocol_says() {
    for case in CASES {
        let dir = common::DataDir::new(case.name, 1);
        let store = dir.log_dir().with_file_name("consumer");
        std::fs::create_dir(&store).expect("the consumer's store directory");
        let input: Vec<String> = case
            .requests
            .iter()
            .map(|line| {
                line.replace("STORE", &store.to_string_lossy()).replace("LOG", &dir.log_dir().to_string_lossy())
            })
            .collect();
        let mut child = Command::new(env!("CARGO_BIN_EXE_consumer"))
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("consumer serve starts");
        let mut stdin = child.stdin.take().expect("piped");
        // The process may end early (a refused init): a closed pipe is then expected.
        let _ = stdin.write_all((input.join("\n") + "\n").as_bytes());
        drop(stdin);
        let output = child.wait_with_output().expect("consumer serve ends");
        let replies = common::stdout(&output);
        let lines: Vec<&str> = replies.lines().collect();
        assert_eq!(lines.len(), case.replies.len(), "{}: replies\n{replies}", case.name);
        for (line, fragment) in lines.iter().zip(case.replies) {
            assert!(line.contains(fragment), "{}: reply\n  {line}\nlacks\n  {fragment}", case.name);
        }
        common::expect_code(case.name, "consumer serve", &output, case.code);
    }
}
