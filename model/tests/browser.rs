//! The explorer in a real browser: `model explore` as a child process, a headless
//! Chromium driven through chromedriver (W3C WebDriver, `common/webdriver.rs`), clicked through
//! the way a new user would. Needs `chromium` and `chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `bash scripts/setup.sh` installs them): without them it prints `skipped:
//! chromium and chromedriver not installed (bash scripts/setup.sh installs it)`, and fails
//! instead when `CI` is set. The whole test is cut at 3 minutes.

#[path = "../../tests/support/tools.rs"]
mod tools;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use webdriver::{fail, Browser, Deadline, Process, REPRO};

/// The whole test's cap (CI's rule for the browser tests): Chromium's start, the explorer's and
/// every click together.
const TEST_TIMEOUT: Duration = Duration::from_secs(180);

/// stateright's explorer page (its ui/index.htm): the next actions are links in the last list
/// of the left column, the path so far the links of the ordered list, the timeline the SVG of
/// the right column (under its heading), the state (or the last step's outcome) the text box under it, and the
/// "Complete State?" checkbox sits in a label of the right column's heading.
const NEXT_ACTIONS: &str = "nav.main-flex-left > ul:last-of-type > li > a";
const PATH_OF_ACTIONS: &str = "nav.main-flex-left > ol.path-list > li > a";
const TIMELINE: &str = "section.main-flex-right svg";
const TIMELINE_TEXT: &str = "section.main-flex-right svg text";
const STATE_PANEL: &str = "section.main-flex-right > div.font-small";
const STATE_HEADING: &str = "section.main-flex-right > .heading-with-controls";
const STATE_OPTIONS: &str = "section.main-flex-right > .heading-with-controls > label";

/// The tests take turns: one Chromium at a time (two at once on two cores starve each other's
/// DevTools connection), and they share the artifacts' directory.
static ONE_BROWSER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where the screenshot and the logs stay after the run (the browser's profile does not).
fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(format!("cannot create {}: {e}", dir.display())));
    dir
}

/// Skips (printing what is missing) when Chromium or chromedriver is missing, unless `CI` is
/// set: then it fails. Returns whether the test should run.
fn browser_available() -> bool {
    match webdriver::missing() {
        None => true,
        Some(missing) => tools::require(&missing, false),
    }
}

/// `model explore ARGS --addr 127.0.0.1:PORT` on a free port, once it listens; its URL.
fn explore(args: &[&str], deadline: Deadline) -> (Process, String) {
    let port = webdriver::free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_model"));
    command.arg("explore").args(args).args(["--addr", &format!("127.0.0.1:{port}")]);
    let mut explorer = Process::spawn("model explore", command, &artifacts().join("explorer.log"), false);
    webdriver::wait_for_port(port, &mut explorer, deadline);
    (explorer, format!("http://127.0.0.1:{port}/"))
}

/// Clicks the next action reading `action` on stateright's page, and waits until the path
/// of actions ends with it (`steps` entries: Pre-init, Init 0 and the actions so far).
fn click_next_action(browser: &Browser, action: &str, steps: usize, deadline: Deadline) {
    let link = browser.wait_for_text(NEXT_ACTIONS, action);
    browser.click(&link);
    deadline.wait_until(&format!("the path of actions to end with {action:?} after {steps} entries"), || {
        let path = browser.find_all(PATH_OF_ACTIONS);
        (path.len() == steps && path.last().and_then(|last| browser.try_text(last)).is_some_and(|t| t.trim() == action))
            .then_some(())
    });
}

/// What both tests start with: their turn, the explorer of effect-first, a browser.
struct Session {
    _turn: std::sync::MutexGuard<'static, ()>,
    _explorer: Process,
    started: Instant,
    deadline: Deadline,
    url: String,
    browser: Browser,
}

/// `None` when the browser is missing outside CI (skipped, said why).
fn session() -> Option<Session> {
    if !browser_available() {
        return None;
    }
    // A test that failed while holding the lock poisons it; the next one still runs.
    let _turn = ONE_BROWSER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let started = Instant::now();
    let deadline = Deadline::after(TEST_TIMEOUT);
    let (_explorer, url) = explore(&["--strategy", "effect-first"], deadline);
    let browser = Browser::start(&artifacts(), deadline);
    Some(Session { _turn, _explorer, started, deadline, url, browser })
}

#[test]
fn a_new_user_clicks_through_a_duplicate_apply_in_stateright_explorer() {
    let Some(Session { _turn, _explorer, started, deadline, url, browser }) = session() else { return };
    browser.goto(&url);

    // effect-first's duplicate: the effect applied, a crash before the commit, the restart
    // fetching the record again and applying it a second time.
    let actions = [
        "Init 0",
        "append (+5) to p0",
        "g0/o0 fetches p0 offset 0",
        "g0/o0 applies the effect of p0 offset 0",
        "g0/o0 crashes",
        "g0/o0 restarts",
        "g0/o0 fetches p0 offset 0",
        "g0/o0 applies the effect of p0 offset 0",
    ];
    for (i, action) in actions.iter().enumerate() {
        click_next_action(&browser, action, i + 2, deadline);
    }

    let path = browser.find_all(PATH_OF_ACTIONS);
    let selected = path.last().and_then(|last| browser.attribute(last, "class")).unwrap_or_default();
    if !selected.split_whitespace().any(|class| class == "is-selected-state") {
        fail(format!("the path's last action should be the selected one; its class is {selected:?}"));
    }

    // The timeline: one row per step, numbered, the last the duplicate apply.
    browser.wait_for(TIMELINE);
    let texts = browser.execute(
        "return Array.from(document.querySelectorAll(arguments[0])).map((t) => t.textContent)",
        serde_json::json!([TIMELINE_TEXT]),
    );
    let rows: Vec<&str> = texts
        .as_array()
        .unwrap_or_else(|| fail(format!("the timeline's texts are not a list: {texts}")))
        .iter()
        .filter_map(|t| t.as_str())
        .filter(|t| t.split_once(". ").is_some_and(|(n, _)| n.parse::<u32>().is_ok()))
        .collect();
    let numbers: Vec<String> = (1..=7).map(|n| format!("{n}. ")).collect();
    if rows.len() != 7 || rows.iter().zip(&numbers).any(|(row, n)| !row.starts_with(n.as_str())) {
        fail(format!("the timeline should have 7 rows numbered 1 to 7, one per step; it has {rows:#?}"));
    }
    for (row, says) in [(3, "applies p0 offset 0 (+5): total 0 -> 5"), (7, "applies p0 offset 0 (+5): total 5 -> 10")] {
        if !rows[row - 1].contains(says) {
            fail(format!("timeline row {row} should say {says:?}: {rows:#?}"));
        }
    }

    // The panel under it: the last step's outcome, then (Complete State? ticked) the state.
    let panel = browser.wait_for(STATE_PANEL);
    let outcome = browser.text(&panel);
    if !outcome.contains("total 5 -> 10") {
        fail(format!("the state panel should show the duplicate apply's outcome (total 5 -> 10): {outcome:?}"));
    }
    let complete = browser.wait_for_text(STATE_OPTIONS, "Complete State?");
    browser.click(&complete);
    let state = deadline.wait_until("the state panel to show the complete state", || {
        Some(browser.text(&panel)).filter(|text| text.starts_with("log p0:"))
    });
    // The state as a person reads it: a short block, the duplicate's total and applied count.
    if !state.contains("g0: total 10 |") || !state.contains("ghost: applied p0 [2") || state.lines().count() > 15 {
        fail(format!("the state should be a short block with g0's total 10 and offset 0 applied twice: {state}"));
    }

    // The duplicate marked in red on the timeline, with its reason in words.
    let marked = browser.execute(MARK_JS, serde_json::json!(["section.main-flex-right svg", "no-duplicate"]));
    assert_marked(&marked, 7, "applied twice: total 5 -> 10");
    let contrast = browser.min_text_contrast(TIMELINE_TEXT);
    println!("browser: minimum contrast of the timeline's text: {contrast}");
    if contrast.ratio < 4.5 {
        fail(format!("the timeline's text must stand at 4.5:1 or more: {contrast}"));
    }

    browser.scroll_to(&browser.wait_for(STATE_HEADING));
    let screenshot = artifacts().join("explorer-effect-first.png");
    browser.screenshot(&screenshot);
    println!("browser: screenshot {}", screenshot.display());
    browser.quit();
    println!("browser: {:.1} s (cap {TEST_TIMEOUT:?}; {REPRO})", started.elapsed().as_secs_f64());
}

/// For the SVG under `arguments[0]`: the violation mark of property `arguments[1]` (its step,
/// its ring's computed stroke, its reason's text, wrapped lines joined) and every property
/// the SVG marks violated.
const MARK_JS: &str = r#"
const svg = document.querySelector(arguments[0]);
if (!svg) return null;
const mark = svg.querySelector(`g.violation[data-property="${arguments[1]}"]`);
const marked = Array.from(svg.querySelectorAll('g.violation')).map((g) => g.getAttribute('data-property'));
if (!mark) return {marked};
return {
    step: Number(mark.getAttribute('data-step')),
    stroke: getComputedStyle(mark.querySelector('circle')).stroke,
    reason: Array.from(mark.querySelectorAll('text')).map((t) => t.textContent).join(' '),
    marked,
};
"#;

fn assert_marked(marked: &serde_json::Value, step: u64, reason: &str) {
    let ok = marked["step"].as_u64() == Some(step)
        && marked["stroke"].as_str() == Some("rgb(255, 107, 107)")
        && marked["reason"].as_str().is_some_and(|text| text.contains(reason));
    if !ok {
        fail(format!("the timeline should ring step {step} in red with a reason containing {reason:?}: {marked}"));
    }
}

/// Our page, `/onceproof`: the shortest no-duplicate link `check` found opens the 6-step path;
/// every property is judged on it, the table and the timeline agree on which fail (none is
/// shown holding where it fails), the state is a short block; then the HTML report of
/// `check --html` opens in the same browser with nothing fetched from the network.
#[test]
fn our_page_opens_the_shortest_duplicate_and_judges_it() {
    let Some(Session { _turn, _explorer, started, deadline, url, browser }) = session() else { return };
    browser.goto(&format!("{url}onceproof"));
    let link = browser.wait_for("#shortest a.shortest[data-property='no-duplicate']");
    let steps: usize = browser.attribute(&link, "data-steps").and_then(|s| s.parse().ok()).unwrap_or(0);
    if steps != 6 {
        fail(format!("check's shortest duplicate of effect-first has 6 steps, the link says {steps}"));
    }
    browser.click(&link);
    deadline.wait_until("the path to show 6 steps", || (browser.find_all("#steps li").len() == 6).then_some(()));
    let row = browser.wait_for("#verdicts tr[data-property='no-duplicate']");
    deadline.wait_until("no-duplicate to be judged violated", || {
        (browser.attribute(&row, "data-verdict").as_deref() == Some("violated")).then_some(())
    });
    let judged = browser.execute(
        "return Array.from(document.querySelectorAll('#verdicts tr[data-verdict=\"violated\"]')).map((r) => r.getAttribute('data-property'))",
        serde_json::json!([]),
    );
    let marked = browser.execute(MARK_JS, serde_json::json!(["#timeline svg", "no-duplicate"]));
    assert_marked(&marked, 6, "applied twice: total 5 -> 10");
    if judged != marked["marked"] || judged.as_array().is_none_or(|v| v.len() < 2) {
        fail(format!("the table's violated properties {judged} differ from the timeline's {}", marked["marked"]));
    }
    let state = browser.text(&browser.wait_for("#state"));
    if !state.contains("total 10") || state.lines().count() > 15 {
        fail(format!("the state should be a short block with a total of 10: {state}"));
    }
    let contrast = browser.min_text_contrast("#timeline svg text");
    if contrast.ratio < 4.5 {
        fail(format!("our page's timeline text must stand at 4.5:1 or more: {contrast}"));
    }
    let screenshot = artifacts().join("onceproof-effect-first.png");
    browser.screenshot(&screenshot);
    println!("browser: screenshot {}", screenshot.display());

    // The HTML report, from a file, with nothing fetched.
    let report = artifacts().join("report.html");
    let output = Command::new(env!("CARGO_BIN_EXE_model"))
        .args(["check", "--strategy", "effect-first", "--groups", "1", "--records", "2", "--html"])
        .arg(&report)
        .output()
        .unwrap_or_else(|e| fail(format!("model check: {e}")));
    if output.status.code() != Some(1) {
        fail(format!("model check --html: {}", String::from_utf8_lossy(&output.stderr)));
    }
    browser.goto(&format!("file://{}", report.display()));
    browser.wait_for("td.violated a[href='#effect-first--no-duplicate']");
    let fetched = browser.execute("return performance.getEntriesByType('resource').length", serde_json::json!([]));
    let marked =
        browser.execute(MARK_JS, serde_json::json!(["h2[id='effect-first--no-duplicate'] + svg", "no-duplicate"]));
    if fetched != serde_json::json!(0) || marked["marked"].as_array().is_none_or(|m| m.is_empty()) {
        fail(format!("the report should fetch nothing ({fetched} fetched) and mark its violations ({marked})"));
    }
    browser.quit();
    println!("browser: {:.1} s (cap {TEST_TIMEOUT:?}; {REPRO})", started.elapsed().as_secs_f64());
}

/// stateright's property lines for the state shown ("Current state?" ticked): the list after the
/// "Current state" heading of the left column, each line's text with its spaces collapsed. Read
/// from the page, not from our JSON, so that it tells what a person sees there.
const CURRENT_STATE_LINES_JS: &str = r#"
const heading = Array.from(document.querySelectorAll('nav.main-flex-left > h3'))
    .find((h) => h.firstChild && h.firstChild.textContent.trim() === 'Current state');
if (!heading || !heading.nextElementSibling) return null;
return Array.from(heading.nextElementSibling.querySelectorAll(':scope > li'))
    .map((li) => li.textContent.split(/\s+/).filter((w) => w !== '').join(' '));
"#;
const CURRENT_STATE_OPTION: &str = "nav.main-flex-left > .heading-with-controls > label";

/// A GET of `path` from the explorer at `url` (`http://127.0.0.1:PORT/`), answered 200 with JSON.
fn get_json(url: &str, path: &str, deadline: Deadline) -> serde_json::Value {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let answer = (|| -> std::io::Result<String> {
        let mut stream = std::net::TcpStream::connect(host)?;
        stream.set_read_timeout(Some(deadline.remaining(&format!("GET {path}"))))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    })()
    .unwrap_or_else(|e| fail(format!("GET {path}: {e}")));
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if head.split_whitespace().nth(1) != Some("200") {
        fail(format!("GET {path}: {head}\n{body}"));
    }
    serde_json::from_str(body).unwrap_or_else(|e| fail(format!("GET {path}: {e}: {body}")))
}

/// What the panel must say of each property, from our judgement of the same path
/// (`/onceproof/.path/...`) in our page's words: "✗ VIOLATED at step 6: Always no-duplicate —
/// g0 p0 offset 0 applied twice: total 5 -> 10", "✓ holds so far: Always contiguous-prefix".
fn expected_lines(view: &serde_json::Value) -> Vec<String> {
    let verdicts = view["verdicts"].as_array().unwrap_or_else(|| fail(format!("no verdicts in {view}")));
    (verdicts.iter())
        .map(|v| {
            let outcome = &v["outcome"];
            let (mark, word) = match outcome["verdict"].as_str() {
                Some("violated") => ("✗", "VIOLATED"),
                Some("reached") => ("◆", "reached"),
                Some("holds-so-far") => ("✓", "holds so far"),
                Some("not-reached") => ("○", "not reached"),
                _ => fail(format!("an unknown verdict in {v}")),
            };
            let step = outcome["step"].as_u64().map(|s| format!(" at step {s}")).unwrap_or_default();
            let expectation = v["expectation"].as_str().unwrap_or_default();
            let capitalised = expectation[..1].to_uppercase() + &expectation[1..];
            let why = outcome["reason"].as_str().map(|r| format!(" — {r}")).unwrap_or_default();
            format!("{mark} {word}{step}: {capitalised} {}{why}", v["name"].as_str().unwrap_or_default())
        })
        .collect()
}

/// stateright's own page, walked by clicking its next-action links along `check`'s shortest
/// duplicate of effect-first (`/onceproof/.shortest`: each index is a link's `#/steps/...`
/// address): at every step, Init 0 included, its "Current state" lines must say for every
/// property exactly what our judgement of that path says (our script rewrites them; without it
/// they would say "Safety holds" at the duplicate). At the end, no-duplicate VIOLATED with its
/// reason, the timeline at its natural size beside the path, and a screenshot.
#[test]
fn stateright_panel_says_our_verdict_at_every_step_to_a_duplicate() {
    let Some(Session { _turn, _explorer, started, deadline, url, browser }) = session() else { return };
    let shortest = get_json(&url, "/onceproof/.shortest", deadline);
    let duplicate = (shortest["shortest"].as_array().into_iter().flatten())
        .find(|s| s["property"] == "no-duplicate")
        .unwrap_or_else(|| fail(format!("check found no duplicate for effect-first: {shortest}")));
    let indices: Vec<&str> = duplicate["path"].as_str().unwrap_or_default().split('/').collect();
    browser.goto(&url);
    browser.click(&browser.wait_for_text(CURRENT_STATE_OPTION, "Current state?"));

    for taken in 1..=indices.len() {
        let path = format!("/{}", indices[..taken].join("/"));
        let link = browser.wait_for(&format!("{NEXT_ACTIONS}[href='#/steps{path}']"));
        let action = browser.text(&link);
        browser.click(&link);
        deadline.wait_until(&format!("the path of actions to end with {action:?}"), || {
            let shown = browser.find_all(PATH_OF_ACTIONS);
            (shown.len() == taken + 1
                && shown.last().and_then(|last| browser.try_text(last)).as_deref() == Some(&action))
            .then_some(())
        });
        let view = get_json(&url, &format!("/onceproof/.path{path}"), deadline);
        let ours = view["steps"].as_array().and_then(|s| s.last()).map(|s| s["action"].clone());
        if taken > 1 && ours.as_ref().and_then(|a| a.as_str()) != Some(action.as_str()) {
            fail(format!("step {}: stateright's link {action:?} is not our path's action {ours:?}", taken - 1));
        }
        assert_panel_says(&browser, &expected_lines(&view), &path);
    }

    let lines = browser.execute(CURRENT_STATE_LINES_JS, serde_json::json!([]));
    let last = lines.as_array().into_iter().flatten().filter_map(|l| l.as_str()).find(|l| l.contains("no-duplicate"));
    if !last
        .is_some_and(|l| l.starts_with("✗ VIOLATED at step 6: Always no-duplicate — ") && l.contains("applied twice"))
    {
        fail(format!("at the duplicate the panel should say no-duplicate is VIOLATED at step 6: {lines}"));
    }
    assert_timeline_readable(&browser);
    let screenshot = artifacts().join("stateright-verdicts-effect-first.png");
    browser.screenshot(&screenshot);
    println!("browser: screenshot {}", screenshot.display());
    browser.quit();
    println!("browser: {:.1} s (cap {TEST_TIMEOUT:?}; {REPRO})", started.elapsed().as_secs_f64());
}

/// How long the panel may take to show a step's verdicts (our script's one request).
const PANEL_WAIT: Duration = Duration::from_secs(10);

/// Waits (at most `PANEL_WAIT`) until the panel's lines are `expected`; fails with both.
fn assert_panel_says(browser: &Browser, expected: &[String], path: &str) {
    let until = Instant::now() + PANEL_WAIT;
    loop {
        let lines = browser.execute(CURRENT_STATE_LINES_JS, serde_json::json!([]));
        let shown: Vec<&str> = lines.as_array().into_iter().flatten().filter_map(|l| l.as_str()).collect();
        if shown == expected {
            return;
        }
        if Instant::now() > until {
            fail(format!("at #/steps{path} stateright's panel says {shown:#?}\nour judgement says {expected:#?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The timeline drawn at its own size (its 11 px text, not shrunk to the column) and its column
/// beside the path, not pushed under it.
fn assert_timeline_readable(browser: &Browser) {
    let layout = browser.execute(
        "const svg = document.querySelector(arguments[0]);
         return {scale: svg.getBoundingClientRect().width / svg.viewBox.baseVal.width,
                 top: document.querySelector('section.main-flex-right').getBoundingClientRect().top};",
        serde_json::json!([TIMELINE]),
    );
    let (scale, top) = (layout["scale"].as_f64().unwrap_or(0.0), layout["top"].as_f64().unwrap_or(f64::MAX));
    if !(0.99..=1.01).contains(&scale) || top > 100.0 {
        fail(format!("the timeline should be at 1:1 (scale {scale}) in the column at the top (top {top} px)"));
    }
}
