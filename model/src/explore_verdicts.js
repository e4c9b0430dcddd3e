// onceproof's verdicts on stateright's explorer page: `model explore` adds this script to the
// page it forwards. Stateright's "Current state" panel (shown with "Current state?") derives each
// property's line from the search's global discovery path, so it can say "Safety holds" at a
// duplicate. This script rewrites each line with the model's judgement of the path the panel
// shows (`/onceproof/.path/...`, the JSON of our own page `/onceproof`, same words), and shows
// the timeline at its natural size (stateright's column shrank its text to about 8 px).
"use strict";
(() => {
  // The words of our page's verdict table, with the timeline's marks.
  const WORDS = {
    "violated": ["✗", "VIOLATED"],
    "reached": ["◆", "reached"],
    "holds-so-far": ["✓", "holds so far"],
    "not-reached": ["○", "not reached"],
  };
  // At most this many judged paths are kept; a walk back and forth reuses them.
  const CACHE_MAX = 256;
  const judged = new Map();

  const style = document.createElement("style");
  style.textContent = `
    li[data-onceproof-verdict="violated"] { color: #ffd7d7; }
    li[data-onceproof-verdict="violated"] > b { color: #ff9b9b; }
    nav.main-flex-left { flex: 0 1 420px; }
    section.main-flex-right { flex: 1 1 400px; min-width: 0; }
    section.main-flex-right .hscroll { overflow-x: auto; }
    section.main-flex-right svg { max-width: none !important; }
    .onceproof-note { font-weight: normal; font-size: 12px; }
  `;
  document.head.appendChild(style);

  // The path of the step the panel is bound to (`/0/3/1`; empty before an initial state).
  function shownPath() {
    const app = window.app;
    return app && app.selectedStep ? app.selectedStep().path || "" : "";
  }

  function judge(path) {
    if (!judged.has(path)) {
      if (judged.size >= CACHE_MAX) judged.clear();
      const answer = fetch("/onceproof/.path" + path).then((r) =>
        r.ok ? r.json() : r.text().then((t) => Promise.reject(new Error(t))));
      // A failed judgement is asked again on the next change, not cached.
      answer.catch(() => judged.delete(path));
      judged.set(path, answer);
    }
    return judged.get(path);
  }

  // The panel's list: the `ul` after the "Current state" heading (absent when unticked).
  function panel() {
    const headings = document.querySelectorAll("nav.main-flex-left > h3");
    const heading = Array.from(headings).find((h) => h.firstChild && h.firstChild.textContent.trim() === "Current state");
    return heading ? [heading, heading.nextElementSibling] : [null, null];
  }

  function line(verdict) {
    const [mark, word] = WORDS[verdict.outcome.verdict] || ["?", verdict.outcome.verdict];
    const step = verdict.outcome.step === undefined ? "" : ` at step ${verdict.outcome.step}`;
    return { summary: `${mark} ${word}${step}: `, why: verdict.outcome.reason ? ` — ${verdict.outcome.reason}` : "" };
  }

  // Rewrites each property's line (stateright's `b` summary and `span` name stay the elements
  // knockout rendered, so a re-render replaces them whole and this runs again).
  function fill(path, view) {
    const [heading, list] = panel();
    if (!list || shownPath() !== path) return;
    if (!heading.querySelector(".onceproof-note")) {
      const note = document.createElement("span");
      note.className = "onceproof-note";
      note.textContent = " (judged on this path by onceproof)";
      heading.appendChild(note);
    }
    const byName = new Map(view.verdicts.map((v) => [v.name, v]));
    for (const li of list.children) {
      const name = li.querySelector("span.font-code");
      const verdict = name && byName.get(name.textContent.trim().split(" ").pop());
      if (!verdict || li.getAttribute("data-onceproof-path") === path) continue;
      const { summary, why } = line(verdict);
      li.querySelector("b").textContent = summary;
      let reason = li.querySelector(".onceproof-why");
      if (!reason) {
        reason = document.createElement("span");
        reason.className = "onceproof-why";
        li.appendChild(reason);
      }
      reason.textContent = why;
      li.setAttribute("data-onceproof-verdict", verdict.outcome.verdict);
      li.setAttribute("data-onceproof-path", path);
    }
  }

  // The timeline at 1:1 (its viewBox width in pixels: 11 px text), scrolled sideways when wider
  // than its column; the column keeps its place beside the path (min-width 0 above).
  function naturalSize() {
    for (const svg of document.querySelectorAll("section.main-flex-right svg[viewBox]")) {
      const width = `${svg.viewBox.baseVal.width}px`;
      if (svg.style.width !== width) svg.style.width = width;
    }
  }

  function refresh() {
    naturalSize();
    const path = shownPath();
    if (path === "" || !panel()[1]) return;
    judge(path).then((view) => fill(path, view), (error) => console.log("onceproof verdicts:", error));
  }

  // Knockout re-renders the panel when the step or the checkbox changes: follow the DOM.
  new MutationObserver(refresh).observe(document.querySelector("main") || document.body, { childList: true, subtree: true });
  window.addEventListener("hashchange", refresh);
  refresh();
})();
