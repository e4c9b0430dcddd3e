//! A small W3C WebDriver client for the browser tests: chromedriver driving a headless Debian
//! Chromium, spoken to over HTTP/1.1 on a `TcpStream` with `serde_json` bodies (no other
//! dependency). Every wait polls with a bound, and every call is cut at the test's deadline;
//! every failure panics with the command that reproduces it. Dropping a [`Browser`] ends the
//! session and kills chromedriver's whole process group (Chromium with it); a [`Process`] kills
//! its child when dropped, so every exit path, panics included, leaves nothing running.
#![allow(dead_code)] // A test uses the part of the client it needs.

use serde_json::{json, Value};
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The command every failure message names.
pub const REPRO: &str = "cargo test -p model --test browser -- --nocapture";

/// Chromium's flags: headless, as root (no sandbox), and without the background requests that
/// stall it on a closed network.
const CHROMIUM_FLAGS: [&str; 9] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,800",
];

/// How often the waits poll.
const POLL: Duration = Duration::from_millis(50);

/// The W3C key under which an element reference is returned.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Fails the test: the message, then the command that reproduces it.
pub fn fail(message: impl fmt::Display) -> ! {
    panic!("{message} [reproduce: {REPRO}]")
}

/// The instant the whole test must finish by; every wait and every request is cut there.
#[derive(Clone, Copy)]
pub struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    pub fn after(limit: Duration) -> Deadline {
        Deadline { at: Instant::now() + limit, limit }
    }

    /// The time left, or a failure naming what was under way when the deadline passed.
    pub fn remaining(&self, doing: &str) -> Duration {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            fail(format!("the browser test passed its {:?} deadline while {doing}", self.limit));
        }
        left
    }

    /// Polls `probe` until it returns `Some`, or fails at the deadline naming `what`.
    pub fn wait_until<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        loop {
            if let Some(found) = probe() {
                return found;
            }
            std::thread::sleep(POLL.min(self.at.saturating_duration_since(Instant::now())));
            self.remaining(&format!("waiting for {what}"));
        }
    }
}

/// A free port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| fail(format!("no free port on 127.0.0.1: {e}")));
    listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| fail(format!("no local address: {e}")))
}

/// Waits until something listens on 127.0.0.1:`port`; fails early if `process` exits first.
pub fn wait_for_port(port: u16, process: &mut Process, deadline: Deadline) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    deadline.wait_until(&format!("{} to listen on port {port}", process.name), || {
        if let Ok(Some(status)) = process.child.try_wait() {
            fail(format!(
                "{} exited ({status}) before listening on port {port}; its log: {}",
                process.name, process.log
            ))
        }
        TcpStream::connect_timeout(&addr, POLL).ok().map(|_| ())
    })
}

/// The executable `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|file| file.is_file())
}

/// What the browser tests need and is not on PATH here (`chromium`, `chromedriver`, or both,
/// `and`-joined); `None` when they can run.
pub fn missing() -> Option<String> {
    let absent: Vec<&str> = ["chromium", "chromedriver"].into_iter().filter(|name| which(name).is_none()).collect();
    (!absent.is_empty()).then(|| absent.join(" and "))
}

/// A child process, killed (its whole process group when it leads one) and reaped when dropped.
pub struct Process {
    child: Child,
    name: String,
    /// Where its stdout and stderr go, for failure messages.
    pub log: String,
    group: bool,
}

impl Process {
    /// Starts `command` with stdout and stderr in `log`; with `group`, as the leader of a new
    /// process group, so that its children (Chromium's processes) are killed with it.
    pub fn spawn(name: &str, mut command: Command, log: &Path, group: bool) -> Process {
        let file = File::create(log).unwrap_or_else(|e| fail(format!("cannot create {}: {e}", log.display())));
        let err = file.try_clone().unwrap_or_else(|e| fail(format!("cannot reopen {}: {e}", log.display())));
        command.stdin(Stdio::null()).stdout(file).stderr(err);
        if group {
            command.process_group(0);
        }
        let child = command.spawn().unwrap_or_else(|e| fail(format!("cannot start {name}: {e}")));
        Process { child, name: name.to_string(), log: log.display().to_string(), group }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.group {
            // The group's id is the leader's pid; `kill -- -PGID` signals every member.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reference to an element of the page.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Element {
    /// The element as an argument of [`Browser::execute`].
    pub fn to_json(&self) -> Value {
        json!({ ELEMENT_KEY: self.0 })
    }
}

/// The lowest contrast found by [`Browser::min_text_contrast`], and where.
#[derive(Debug)]
pub struct Contrast {
    /// WCAG 2 contrast ratio, from 1 to 21.
    pub ratio: f64,
    /// The text drawn with it, and its computed fill and background colours.
    pub text: String,
    pub fill: String,
    pub background: String,
}

impl fmt::Display for Contrast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2}:1 ({:?}: fill {} on {})", self.ratio, self.text, self.fill, self.background)
    }
}

/// One WebDriver session on a headless Chromium, through a chromedriver of its own.
pub struct Browser {
    port: u16,
    session: String,
    deadline: Deadline,
    profile: PathBuf,
    driver: Option<Process>,
}

impl Browser {
    /// Starts chromedriver on a free port (its log in `dir`) and a session on a fresh profile
    /// under `dir`.
    pub fn start(dir: &Path, deadline: Deadline) -> Browser {
        let chromium = which("chromium").unwrap_or_else(|| fail("chromium is not on PATH"));
        let chromedriver = which("chromedriver").unwrap_or_else(|| fail("chromedriver is not on PATH"));
        let port = free_port();
        let mut command = Command::new(chromedriver);
        command.arg(format!("--port={port}"));
        let mut driver = Process::spawn("chromedriver", command, &dir.join("chromedriver.log"), true);
        wait_for_port(port, &mut driver, deadline);
        let profile = dir.join(format!("profile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        let mut browser = Browser { port, session: String::new(), deadline, profile, driver: Some(driver) };
        deadline.wait_until("chromedriver to be ready", || {
            browser.request("GET", "/status", None).ok().filter(|v| v["ready"] == true)
        });
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|flag| flag.to_string()).collect();
        args.push(format!("--user-data-dir={}", browser.profile.display()));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let created = browser
            .request("POST", "/session", Some(&capabilities))
            .unwrap_or_else(|e| fail(format!("chromedriver started no Chromium session: {e}")));
        browser.session =
            created["sessionId"].as_str().unwrap_or_else(|| fail(format!("no session id in {created}"))).into();
        browser
    }

    /// Opens `url` (returns once the page has loaded).
    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", json!({ "url": url }));
    }

    /// Every element matching the CSS `selector`, now (possibly none).
    pub fn find_all(&self, selector: &str) -> Vec<Element> {
        let found = self.command("POST", "/elements", json!({"using": "css selector", "value": selector}));
        found.as_array().map_or(Vec::new(), |all| all.iter().filter_map(element).collect())
    }

    /// The first element matching the CSS `selector`, once there is one.
    pub fn wait_for(&self, selector: &str) -> Element {
        self.deadline.wait_until(&format!("an element `{selector}`"), || self.find_all(selector).into_iter().next())
    }

    /// The first element matching the CSS `selector` whose text is `text` (trimmed), once there
    /// is one: how a person finds a link or a label.
    pub fn wait_for_text(&self, selector: &str, text: &str) -> Element {
        self.deadline.wait_until(&format!("an element `{selector}` reading {text:?}"), || {
            self.find_all(selector).into_iter().find(|e| self.try_text(e).is_some_and(|t| t.trim() == text))
        })
    }

    /// Clicks `element` as a user would (scrolled into view; fails if something covers it).
    pub fn click(&self, element: &Element) {
        self.command("POST", &format!("/element/{}/click", element.0), json!({}));
    }

    /// Scrolls the page so that `element` is at the top of the viewport.
    pub fn scroll_to(&self, element: &Element) {
        self.execute("arguments[0].scrollIntoView({block: 'start'})", json!([element.to_json()]));
    }

    /// The rendered text of `element`.
    pub fn text(&self, element: &Element) -> String {
        let text = self.command("GET", &format!("/element/{}/text", element.0), Value::Null);
        text.as_str().unwrap_or_else(|| fail(format!("element text is not a string: {text}"))).to_string()
    }

    /// The attribute `name` of `element`, if it has it.
    pub fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        self.command("GET", &format!("/element/{}/attribute/{name}", element.0), Value::Null).as_str().map(String::from)
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page and returns what
    /// it returns, as JSON (elements as `{ELEMENT_KEY: id}`).
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.command("POST", "/execute/sync", json!({ "script": script, "args": args }))
    }

    /// The lowest WCAG contrast ratio between the computed fill of the elements matching
    /// `selector` (SVG text) and the first opaque background behind each (an ancestor's
    /// computed background colour; white if none). Fails if no element has a colour fill.
    pub fn min_text_contrast(&self, selector: &str) -> Contrast {
        let worst = self.execute(CONTRAST_JS, json!([selector]));
        let field = |name: &str| worst[name].as_str().unwrap_or_default().to_string();
        match worst["ratio"].as_f64() {
            Some(ratio) => {
                Contrast { ratio, text: field("text"), fill: field("fill"), background: field("background") }
            }
            None => fail(format!("no element `{selector}` with a colour fill to measure: {worst}")),
        }
    }

    /// Saves a PNG of the viewport as `path`.
    pub fn screenshot(&self, path: &Path) {
        let encoded = self.command("GET", "/screenshot", Value::Null);
        let text = encoded.as_str().unwrap_or_else(|| fail(format!("the screenshot is not a string: {encoded}")));
        let png = base64_decode(text).unwrap_or_else(|e| fail(format!("the screenshot is not base64: {e}")));
        std::fs::write(path, png).unwrap_or_else(|e| fail(format!("cannot write {}: {e}", path.display())));
    }

    /// Ends the session (closing Chromium). Dropping the browser does it too.
    pub fn quit(mut self) {
        self.delete_session();
    }

    fn delete_session(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", std::mem::take(&mut self.session));
            let _ = http(self.port, "DELETE", &path, None, Duration::from_secs(10));
        }
    }

    /// The rendered text of `element`, or `None` if it has left the page (for polling).
    pub fn try_text(&self, element: &Element) -> Option<String> {
        let path = format!("/session/{}/element/{}/text", self.session, element.0);
        self.request("GET", &path, None).ok().and_then(|v| v.as_str().map(String::from))
    }

    /// A command of this session: `suffix` after `/session/ID`; fails on a WebDriver error.
    fn command(&self, method: &str, suffix: &str, body: Value) -> Value {
        let path = format!("/session/{}{suffix}", self.session);
        let body = (!body.is_null()).then_some(body);
        self.request(method, &path, body.as_ref()).unwrap_or_else(|e| fail(format!("WebDriver {method} {suffix}: {e}")))
    }

    /// One request to chromedriver, cut at the deadline; the response's `value`.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let left = self.deadline.remaining(&format!("WebDriver {method} {path} was to start"));
        let result = http(self.port, method, path, body, left);
        if result.is_err() {
            self.deadline.remaining(&format!("waiting for WebDriver {method} {path}"));
        }
        result
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.delete_session();
        drop(self.driver.take());
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn element(value: &Value) -> Option<Element> {
    value[ELEMENT_KEY].as_str().map(|id| Element(id.to_string()))
}

/// One HTTP/1.1 request to 127.0.0.1:`port` (a connection each), within `timeout`; the JSON
/// body's `value`, or the WebDriver error (or the transport's) as text.
fn http(port: u16, method: &str, path: &str, body: Option<&Value>, timeout: Duration) -> Result<Value, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .map_err(|e| format!("send: {e}"))?;
    // chromedriver keeps the connection open: read the headers, then the body they announce.
    let (mut response, mut chunk) = (Vec::new(), [0u8; 16384]);
    let body_of = |response: &[u8]| -> Result<Option<(u16, Vec<u8>)>, String> {
        let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
        let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("no status in the response")?;
        let header = |name: &str| {
            head.lines().find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(':')).map(str::trim))
        };
        let content = &response[split + 4..];
        Ok(if header("transfer-encoding") == Some("chunked") {
            dechunk(content).map(|body| (status, body))
        } else {
            let length: usize = header("content-length").and_then(|n| n.parse().ok()).ok_or("no content-length")?;
            (content.len() >= length).then(|| (status, content[..length].to_vec()))
        })
    };
    let (status, content) = loop {
        if let Some(done) = body_of(&response)? {
            break done;
        }
        match stream.read(&mut chunk).map_err(|e| format!("receive: {e}"))? {
            0 => return Err("the connection closed before the response's end".into()),
            n => response.extend_from_slice(&chunk[..n]),
        }
    };
    let json: Value = serde_json::from_slice(&content).map_err(|e| format!("HTTP {status}, not JSON ({e})"))?;
    let value = json.get("value").cloned().unwrap_or(Value::Null);
    if status == 200 {
        Ok(value)
    } else {
        Err(format!("HTTP {status}: {}: {}", value["error"], value["message"]))
    }
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line]).ok()?.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(line + 2..line + 2 + size)?);
        body = body.get(line + 4 + size..)?;
    }
}

/// Standard base64 (RFC 4648, with padding), as WebDriver's screenshots are.
fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let sextet = |c: u8| match c {
        b'A'..=b'Z' => Ok(c - b'A'),
        b'a'..=b'z' => Ok(c - b'a' + 26),
        b'0'..=b'9' => Ok(c - b'0' + 52),
        b'+' => Ok(62),
        b'/' => Ok(63),
        _ => Err(format!("byte {c:#04x} is not base64")),
    };
    let (mut out, mut bits, mut count) = (Vec::with_capacity(text.len() * 3 / 4), 0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()) {
        bits = bits << 6 | u32::from(sextet(c)?);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    Ok(out)
}

/// `min_text_contrast`'s measurement: WCAG 2 relative luminance of sRGB colours; a background
/// is the first ancestor's computed background colour that is not transparent.
const CONTRAST_JS: &str = r#"
const parse = (css) => {
    const m = /rgba?\(([^)]*)\)/.exec(css || '');
    if (!m) return null;
    const [r, g, b, a] = m[1].split(/[\s,\/]+/).filter((s) => s).map(Number);
    return {r, g, b, a: a === undefined ? 1 : a, css};
};
const luminance = ({r, g, b}) => {
    const lin = (v) => (v /= 255) <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
};
const background = (el) => {
    // Inside an SVG that paints its own background (its first rect), that is what is behind.
    const svg = el.ownerSVGElement;
    const rect = svg && svg.querySelector('rect');
    if (rect) {
        const c = parse(getComputedStyle(rect).fill);
        if (c && c.a > 0) return c;
    }
    for (let e = el; e; e = e.parentElement) {
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c && c.a > 0) return c;
    }
    return {r: 255, g: 255, b: 255, a: 1, css: 'rgb(255, 255, 255) (no background)'};
};
let worst = null;
for (const el of document.querySelectorAll(arguments[0])) {
    const fill = parse(getComputedStyle(el).fill);
    if (!fill || fill.a === 0) continue;
    const bg = background(el);
    const [l1, l2] = [luminance(fill), luminance(bg)];
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (!worst || ratio < worst.ratio) worst = {ratio, text: el.textContent, fill: fill.css, background: bg.css};
}
return worst;
"#;

#[test]
fn base64_decodes_padded_and_unpadded_text() {
    assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
    assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
    assert_eq!(base64_decode("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
    assert!(base64_decode("a*b").is_err());
}

#[test]
fn chunked_bodies_are_joined() {
    assert_eq!(dechunk(b"4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n").unwrap(), b"{\"a\":1}");
    assert!(dechunk(b"9\r\nshort\r\n").is_none());
}
