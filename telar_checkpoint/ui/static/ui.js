// The viewer's only script: it follows an open thread as a graph writes to it, and the thread
// list while the store is still being read. It asks the server for the thread's version every
// POLL_MS; when a namespace's latest checkpoint changed it fetches only the new rows of the root
// timeline (or the timeline again, when a subgraph's changed), the thread's summary, and the
// checkpoint shown when the page follows the latest one. Nothing it inserts is built from text: the server's HTML
// fragments are escaped there.
"use strict";
const POLL_MS = 1000;

function lastRootId(timeline) {
  const rows = timeline.querySelectorAll(":scope > li.row");
  return rows.length ? rows[rows.length - 1].dataset.id : "";
}

async function fragment(params) {
  const response = await fetch("/thread?" + new URLSearchParams(params), { credentials: "same-origin" });
  if (!response.ok) throw new Error(response.status + " " + response.statusText);
  const template = document.createElement("template");
  template.innerHTML = await response.text();
  return template.content;
}

async function follow(live) {
  const thread = live.dataset.thread;
  const state = document.getElementById("live-state");
  const timeline = document.getElementById("timeline");
  let version = live.dataset.version;
  let latest = JSON.parse(live.dataset.latest);  // namespace -> latest checkpoint id, as the page shows them
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    let now;
    try {
      const response = await fetch("/version?" + new URLSearchParams({ id: thread, seen: version }), { credentials: "same-origin" });
      now = await response.json();
    } catch (error) {
      state.textContent = "· not following: " + error;
      continue;
    }
    if (now.version === version) { state.textContent = "· following"; continue; }
    version = now.version;
    const changed = Object.keys(now.latest).filter((ns) => now.latest[ns] !== latest[ns]);
    latest = now.latest;
    if (!changed.length) continue;
    if (changed.every((ns) => ns === "") && timeline) {
      timeline.append(await fragment({ id: thread, part: "rows", after: lastRootId(timeline) }));
    } else if (timeline) {
      const page = await fragment({ id: thread });
      const fresh = page.querySelector("#timeline");
      if (fresh) timeline.replaceChildren(...fresh.childNodes);
    }
    document.getElementById("head").replaceChildren(await fragment({ id: thread, part: "head" }));
    if (live.dataset.following === "yes") {
      const detail = document.getElementById("detail");
      detail.replaceChildren(await fragment({ id: thread, part: "detail" }));
      for (const row of document.querySelectorAll("li.row.selected")) row.classList.remove("selected");
      const rows = timeline ? timeline.querySelectorAll(":scope > li.row") : [];
      if (rows.length) rows[rows.length - 1].classList.add("selected");
    }
    state.textContent = "· updated " + new Date().toLocaleTimeString();
    live.dataset.version = version;
  }
}

function refreshWhileReading(counts) {
  if (counts.dataset.reading === "yes") setTimeout(() => window.location.reload(), 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (live && live.dataset.live === "yes") follow(live);  // (a page of earlier checkpoints stays as it is)
  const counts = document.getElementById("counts");
  if (counts) refreshWhileReading(counts);
});
