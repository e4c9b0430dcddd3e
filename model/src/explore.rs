//! `model explore`: stateright's web explorer behind a server of ours that adds a page at
//! `/onceproof` and a script to stateright's page. Stateright's "Current state" panel reads the
//! checker's global discoveries, not the state shown; we cannot patch its bundled UI, so the
//! forwarded index gets `explore_verdicts.js`, which rewrites that panel's lines with our
//! judgement of the path shown and shows the timeline at a readable size. Our page judges every
//! property on the path being viewed, shows the compact state and our timeline, and links the
//! shortest counterexample of every property, found by `check` first.
//!
//! One address serves both: ours answers `/onceproof...` and forwards every other request to
//! stateright's server, which listens on a loopback port of its own.

use anyhow::Context;
use model::check::{self, CheckOptions, CheckReport, Search, Verdict};
use model::{Action, ConsumerModel, State};
use serde_json::json;
use stateright::Model;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long stateright's server may take to start listening.
const STARTUP_TIMEOUT_MS: u64 = 10_000;
/// The longest path `/onceproof/.path/...` accepts: far above any shortest counterexample.
const PATH_STEPS_MAX: usize = 1_000;

/// Binds `addr` (refusing it in one line if it cannot), runs the check, starts stateright's
/// explorer on a loopback port and serves both on `addr` until killed.
pub fn run(config: model::Config, addr: &str) -> anyhow::Result<()> {
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let model = ConsumerModel::new(config.clone());
    let options = CheckOptions { search: Search::Bfs, threads: 2, ..CheckOptions::default() };
    let report = check::run(&model, &options, &mut |_| {});
    let inner = free_loopback_port()?;
    std::thread::spawn(move || ConsumerModel::new(config).checker().serve(inner));
    wait_until_listening(inner)?;
    let shortest = shortest_paths(&model, &report);
    print_urls(&model, addr, &shortest)?;
    for request in server.incoming_requests() {
        let response = respond(&model, &shortest, inner, &request);
        // A client gone before its answer is no reason to stop serving the others.
        let _ = request.respond(response);
    }
    Ok(())
}

/// A shortest discovery of `check`, as explorer paths.
struct Shortest {
    property: String,
    verdict: &'static str,
    steps: usize,
    /// `0/3/1/...`: the initial state's index, then each action's index among the enabled ones.
    indices: String,
}

fn shortest_paths(model: &ConsumerModel, report: &CheckReport) -> Vec<Shortest> {
    let found = report.properties.iter().filter(|p| matches!(p.verdict, Verdict::Violated | Verdict::Reached));
    found
        .map(|p| Shortest {
            property: p.name.clone(),
            verdict: p.verdict.word(),
            steps: p.actions.len(),
            indices: action_indices(model, &p.actions),
        })
        .collect()
}

/// The explorer's path of `actions`: `0`, then each action's index among the enabled actions
/// of the state before it (stateright's `Path::encode`).
fn action_indices(model: &ConsumerModel, actions: &[Action]) -> String {
    let mut state = model.init_states().remove(0);
    let mut indices = vec!["0".to_string()];
    let mut enabled = Vec::new();
    for action in actions {
        enabled.clear();
        model.actions(&state, &mut enabled);
        let index = enabled.iter().position(|a| a == action).expect("a check's path replays");
        indices.push(index.to_string());
        state = model.next_state(&state, *action).expect("enabled actions have a successor");
    }
    indices.join("/")
}

fn print_urls(model: &ConsumerModel, addr: &str, shortest: &[Shortest]) -> Result<(), crate::out::OutputError> {
    let strategy = model.config.strategy;
    outln!("explorer for {strategy}:")?;
    outln!("  ours:        http://{addr}/onceproof   (verdicts judged on the path you view: trust this one)")?;
    outln!(
        "  stateright:  http://{addr}/   (tick \"Current state?\": our script judges its property lines \
         on the path shown; the timeline in it is ours and judges the path too)"
    )?;
    outln!("shortest paths found by check (ours / stateright's):")?;
    for s in shortest {
        outln!(
            "  {} {} in {} steps: http://{addr}/onceproof#/steps/{}  http://{addr}/#/steps/{}",
            s.property,
            s.verdict,
            s.steps,
            s.indices,
            s.indices
        )?;
    }
    outln!("(Ctrl-C to stop; stateright explores states on demand as you click)")?;
    Ok(())
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn respond(model: &ConsumerModel, shortest: &[Shortest], inner: SocketAddr, request: &tiny_http::Request) -> Response {
    let url = request.url().to_string();
    let path = url.split('?').next().unwrap_or("");
    match (request.method(), path) {
        (tiny_http::Method::Get, "/onceproof" | "/onceproof/") => with_type(page(model), "text/html; charset=utf-8"),
        (tiny_http::Method::Get, "/onceproof/.shortest") => {
            let list: Vec<_> = (shortest.iter())
                .map(|s| json!({"property": s.property, "verdict": s.verdict, "steps": s.steps, "path": s.indices}))
                .collect();
            with_type(json!({"strategy": model.config.strategy.to_string(), "shortest": list}).to_string(), JSON)
        }
        (tiny_http::Method::Get, "/onceproof/verdicts.js") => {
            with_type(VERDICTS_SCRIPT.to_string(), "text/javascript; charset=utf-8")
        }
        (tiny_http::Method::Get, _) if path.starts_with("/onceproof/.path") => {
            match path_view(model, path.trim_start_matches("/onceproof/.path")) {
                Ok(view) => with_type(view.to_string(), JSON),
                Err(problem) => with_type(problem, "text/plain; charset=utf-8").with_status_code(404),
            }
        }
        (tiny_http::Method::Get, "/") => forward_index(inner, request),
        _ => forward(inner, request),
    }
}

/// Rewrites stateright's "Current state" panel with our judgement (`explore_verdicts.js`).
const VERDICTS_SCRIPT: &str = include_str!("explore_verdicts.js");
/// How stateright's index loads it: last, after stateright's own script defined `window.app`.
const VERDICTS_TAG: &str = "<script src='/onceproof/verdicts.js'></script>";

/// Stateright's index page no longer ends its body where the script is to go (a stateright
/// upgrade that changed `ui/index.htm`): serving it without the script would bring back the
/// panel's wrong verdicts unannounced.
#[derive(Debug, PartialEq, Eq)]
pub struct NoBodyEnd;

impl std::fmt::Display for NoBodyEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stateright's page has no </body> to add onceproof's verdicts script before")
    }
}

/// `page` with `tag` before its last `</body>`.
fn with_script(page: &[u8], tag: &str) -> Result<Vec<u8>, NoBodyEnd> {
    let end = page.windows(b"</body>".len()).rposition(|w| w.eq_ignore_ascii_case(b"</body>")).ok_or(NoBodyEnd)?;
    Ok([&page[..end], tag.as_bytes(), b"\n", &page[end..]].concat())
}

/// Stateright's index with our verdicts script; its errors pass through as they are.
fn forward_index(inner: SocketAddr, request: &tiny_http::Request) -> Response {
    let (status, content_type, body) = match forward_raw(inner, request) {
        Ok(answer) => answer,
        Err(error) => return unreachable_inner(&error),
    };
    if status != 200 {
        return with_type(String::from_utf8_lossy(&body).to_string(), "text/plain").with_status_code(status);
    }
    match with_script(&body, VERDICTS_TAG) {
        Ok(page) => tiny_http::Response::from_data(page).with_header(
            tiny_http::Header::from_bytes(
                "Content-Type",
                content_type.as_deref().unwrap_or("text/html; charset=utf-8"),
            )
            .expect("a valid header"),
        ),
        Err(missing) => with_type(missing.to_string(), "text/plain").with_status_code(502),
    }
}

fn unreachable_inner(error: &anyhow::Error) -> Response {
    with_type(format!("stateright's explorer did not answer: {error:#}"), "text/plain").with_status_code(502)
}

const JSON: &str = "application/json";

fn with_type(body: String, content_type: &str) -> Response {
    let header = tiny_http::Header::from_bytes("Content-Type", content_type).expect("a valid header");
    tiny_http::Response::from_data(body.into_bytes()).with_header(header)
}

/// The path `/0/3/1` as the states it visits: an unknown index is refused, naming it.
fn walk(model: &ConsumerModel, indices: &str) -> Result<Vec<(State, Option<Action>)>, String> {
    let parts: Vec<&str> = indices.split('/').filter(|p| !p.is_empty()).collect();
    if parts.len() > PATH_STEPS_MAX + 1 {
        return Err(format!("a path of at most {PATH_STEPS_MAX} steps, not {}", parts.len() - 1));
    }
    let number = |part: &str| part.parse::<usize>().map_err(|_| format!("'{part}' is not an index"));
    let mut inits = model.init_states();
    let first = number(parts.first().copied().unwrap_or("0"))?;
    if first >= inits.len() {
        return Err(format!("no initial state {first}"));
    }
    let mut path = vec![(inits.swap_remove(first), None)];
    let mut enabled = Vec::new();
    for (step, part) in parts.iter().enumerate().skip(1) {
        let index = number(part)?;
        let state = &path.last().expect("the path starts with a state").0;
        enabled.clear();
        model.actions(state, &mut enabled);
        let action = *enabled.get(index).ok_or(format!("step {step}: no action {index} (of {})", enabled.len()))?;
        let next = model.next_state(state, action).expect("enabled actions have a successor");
        path.last_mut().expect("the path starts with a state").1 = Some(action);
        path.push((next, None));
    }
    Ok(path)
}

/// What our page shows of a path: its steps, each property's verdict on it, the compact and
/// full state at its end, and our timeline.
fn path_view(model: &ConsumerModel, indices: &str) -> Result<serde_json::Value, String> {
    let path = walk(model, indices)?;
    let steps: Vec<_> = (path.iter())
        .filter_map(|(state, action)| {
            action.map(|a| json!({"action": a.to_string(), "description": model.describe_step(state, &a)}))
        })
        .collect();
    let last = &path.last().expect("a path has a state").0;
    Ok(json!({
        "strategy": model.config.strategy.to_string(),
        "steps": steps,
        "verdicts": model::view::judge_path(model, &path),
        "state": model::view::compact(last),
        "full_state": format!("{:#?}", last.full()),
        "svg": model::svg::timeline(model, &path),
    }))
}

/// Forwards a request to stateright's server and its answer back (status, type, body).
fn forward(inner: SocketAddr, request: &tiny_http::Request) -> Response {
    match forward_raw(inner, request) {
        Ok((status, content_type, body)) => {
            let response = tiny_http::Response::from_data(body).with_status_code(status);
            match content_type.and_then(|t| tiny_http::Header::from_bytes("Content-Type", t).ok()) {
                Some(header) => response.with_header(header),
                None => response,
            }
        }
        Err(error) => unreachable_inner(&error),
    }
}

fn forward_raw(inner: SocketAddr, request: &tiny_http::Request) -> anyhow::Result<(u16, Option<String>, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&inner, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(600)))?;
    // HTTP/1.0: the answer ends when the connection closes, never chunked.
    let head = format!("{} {} HTTP/1.0\r\nHost: {inner}\r\nContent-Length: 0\r\n\r\n", request.method(), request.url());
    stream.write_all(head.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").context("no end of headers")?;
    let head = String::from_utf8_lossy(&answer[..split]).to_string();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).context("no status")?;
    let content_type = head
        .lines()
        .find_map(|line| line.split_once(':').filter(|(name, _)| name.eq_ignore_ascii_case("content-type")))
        .map(|(_, value)| value.trim().to_string());
    Ok((status, content_type, answer[split + 4..].to_vec()))
}

fn free_loopback_port() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port")?;
    Ok(listener.local_addr()?)
}

fn wait_until_listening(inner: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_millis(STARTUP_TIMEOUT_MS);
    while TcpStream::connect(inner).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "stateright's explorer did not start on {inner}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Our page: plain HTML and script, no external assets, reading `/onceproof/.path/...` (ours)
/// and `/.states/...` (stateright's JSON API, for the next actions).
fn page(model: &ConsumerModel) -> String {
    PAGE.replace("{{STRATEGY}}", &model.config.strategy.to_string())
}

const PAGE: &str = include_str!("explore.html");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_goes_before_the_last_body_end_or_is_refused() {
        let page = with_script(b"<body><p>x</p></BODY>\n</html>", "<s>").expect("a body end");
        assert_eq!(String::from_utf8_lossy(&page), "<body><p>x</p><s>\n</BODY>\n</html>");
        assert_eq!(with_script(b"<html>no end", "<s>"), Err(NoBodyEnd));
    }
}
