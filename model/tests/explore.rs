//! `model explore` over HTTP: our page and its JSON beside stateright's forwarded explorer, the
//! shortest paths `check` found, and the refusals. (The browser test drives the same pages.)

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the debug binary may take to check the small bounds and start listening.
const STARTUP_MAX: Duration = Duration::from_secs(90);

/// The explorer, killed when dropped.
struct Explorer(Child, String);

impl Drop for Explorer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(strategy: &str) -> Explorer {
    let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("an address").port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_model"))
        .args(["explore", "--strategy", strategy, "--groups", "1", "--records", "2", "--addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the model binary runs");
    let explorer = Explorer(child, addr);
    let deadline = Instant::now() + STARTUP_MAX;
    while get(&explorer.1, "/onceproof/.shortest").is_err() {
        assert!(
            Instant::now() < deadline,
            "explore did not answer in {STARTUP_MAX:?}: cargo test -p model --test explore"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    explorer
}

/// A GET over HTTP/1.0: (status, body).
fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    get_with_head(addr, path).map(|(status, _, body)| (status, body))
}

/// A GET over HTTP/1.0: (status, head, body).
fn get_with_head(addr: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

fn get_json(addr: &str, path: &str) -> Value {
    let (status, body) = get(addr, path).expect("the explorer answers");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

#[test]
fn our_page_judges_the_shortest_counterexample_beside_stateright() {
    let explorer = start("effect-first");
    let addr = &explorer.1;
    let shortest = get_json(addr, "/onceproof/.shortest");
    assert_eq!(shortest["strategy"], "effect-first");
    let list = shortest["shortest"].as_array().expect("a list");
    let duplicate = list.iter().find(|s| s["property"] == "no-duplicate").expect("no-duplicate is violated");
    let steps = duplicate["steps"].as_u64().expect("a count");
    let path = duplicate["path"].as_str().expect("a path");
    assert_eq!(path.split('/').count() as u64, steps + 1, "{path}");
    // The path judged on our page: violated at its last step, with the reason; the state and
    // the timeline name it.
    let view = get_json(addr, &format!("/onceproof/.path/{path}"));
    assert_eq!(view["steps"].as_array().expect("steps").len() as u64, steps);
    let verdict = view["verdicts"].as_array().expect("verdicts").iter().find(|v| v["name"] == "no-duplicate").cloned();
    let outcome = &verdict.expect("no-duplicate is judged")["outcome"];
    assert_eq!((outcome["verdict"].as_str(), outcome["step"].as_u64()), (Some("violated"), Some(steps)));
    assert!(outcome["reason"].as_str().expect("a reason").contains("applied twice"), "{outcome}");
    assert!(view["svg"].as_str().expect("svg").contains("class='violation' data-property='no-duplicate'"));
    assert!(view["state"].as_str().expect("state").contains("ghost: applied p0 [2"), "{}", view["state"]);
    // Stateright's explorer answers through ours, and our page is served.
    let status = get_json(addr, "/.status");
    assert!(status["model"].as_str().expect("a model name").contains("ConsumerModel"));
    let next = get_json(addr, "/.states/0");
    assert!(next.as_array().is_some_and(|steps| !steps.is_empty()), "{next}");
    let (code, page) = get(addr, "/onceproof").expect("our page");
    assert_eq!(code, 200);
    assert!(page.contains("onceproof explorer: <span id=\"strategy\">effect-first</span>"));
    // A path that leaves the graph is refused, naming the step.
    let (code, body) = get(addr, "/onceproof/.path/0/99").expect("an answer");
    assert_eq!((code, body.contains("step 1: no action 99")), (404, true), "{body}");
}

/// Stateright's index comes with our verdicts script, once, after stateright's own script (which
/// defines the `app` it reads) and before the body ends; the script is served beside our page,
/// reads our judgement of a path, and nothing else of stateright's is changed.
#[test]
fn stateright_page_carries_our_verdicts_script() {
    let explorer = start("effect-first");
    let addr = &explorer.1;
    let (code, head, page) = get_with_head(addr, "/").expect("stateright's page");
    assert_eq!(code, 200, "{page}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/html"), "{head}");
    let tag = "<script src='/onceproof/verdicts.js'></script>";
    assert_eq!(page.matches(tag).count(), 1, "{page}");
    let at = |text: &str| page.find(text).unwrap_or_else(|| panic!("no {text} in {page}"));
    let (app, ours, end) = (at("<script src=\"app.js\">"), at(tag), at("</body>"));
    assert!(app < ours && ours < end, "the script goes after app.js, before </body>: {page}");
    assert!(page.contains("<title>Stateright Explorer</title>"), "{page}");
    let (code, head, script) = get_with_head(addr, "/onceproof/verdicts.js").expect("our script");
    assert_eq!(code, 200, "{script}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/javascript"), "{head}");
    assert!(script.contains("\"/onceproof/.path\" + path") && script.contains("Current state"), "{script}");
    // Stateright's other files pass through untouched.
    let (code, app_js) = get(addr, "/app.js").expect("stateright's script");
    assert_eq!((code, app_js.contains("onceproof")), (200, false));
}

#[test]
fn an_address_that_cannot_be_bound_is_one_line_and_exit_2() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("an address").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_model"))
        .args(["explore", "--strategy", "atomic", "--addr", &addr])
        .output()
        .expect("the model binary runs");
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{errors}");
    assert_eq!(errors.lines().count(), 1, "{errors}");
    assert!(errors.contains(&format!("cannot listen on {addr}")), "{errors}");
}
