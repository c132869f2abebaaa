// Logs tab: backlog then live lines over /ws/jobs/<id>/logs/; stream picker, filter, follow, download.
// Every message carries the cursor after its lines; a reconnect hands it back (?after=) and
// gets exactly the lines stored meanwhile, so a dropped connection loses or repeats nothing.
(function () {
  const meta = JSON.parse(document.getElementById("job-meta").textContent);
  const view = document.getElementById("log-view");
  const picker = document.getElementById("log-stream");
  const filter = document.getElementById("log-filter");
  const follow = document.getElementById("log-follow");
  const state = document.getElementById("log-state");
  const download = document.getElementById("log-download");
  const MAX_LINES = 20000;
  // an ended job gets no new lines: its tab must not say "Live"
  let ended = meta.ended ? meta.status : "";
  const connectedText = () => (ended ? `Job ${ended}: every stored line is shown; no new lines will arrive` : "Live");
  const seen = new Set();
  const lines = []; // {key, stream, ts, text}
  let cursor = "";

  function addStream(name) {
    if (Array.from(picker.options).some((o) => o.value === name)) return;
    picker.add(new Option(name, name));
  }

  function visible(line) {
    const stream = picker.value;
    const text = filter.value.toLowerCase();
    return (!stream || line.stream === stream) && (!text || line.text.toLowerCase().includes(text));
  }

  function render(line) {
    const row = document.createElement("div");
    row.className = "log-line";
    row.dataset.stream = line.stream;
    const time = new Date(line.ts * 1000).toISOString().slice(11, 23);
    // textContent, never innerHTML: a log line is text, whatever it contains
    row.textContent = `${time} [${line.stream}] ${line.text}`;
    return row;
  }

  function add({ stream, attempt, seq, ts, text }) {
    const key = `${stream}/${attempt}/${seq}`;
    if (seen.has(key)) return null; // a safety net: the cursor already sends each line once
    seen.add(key);
    addStream(stream);
    const line = { key, stream, ts, text };
    lines.push(line);
    if (lines.length > MAX_LINES) seen.delete(lines.shift().key);
    return line;
  }

  function redraw() {
    view.replaceChildren(...lines.filter(visible).map(render));
    if (follow.checked) view.scrollTop = view.scrollHeight;
  }

  function append(newLines) {
    const fragment = document.createDocumentFragment();
    newLines.filter((l) => l && visible(l)).forEach((l) => fragment.appendChild(render(l)));
    view.appendChild(fragment);
    while (view.childElementCount > MAX_LINES) view.firstChild.remove();
    if (follow.checked) view.scrollTop = view.scrollHeight;
  }

  picker.addEventListener("change", () => {
    download.href = download.href.split("?")[0] + (picker.value ? `?stream=${encodeURIComponent(picker.value)}` : "");
    redraw();
  });
  filter.addEventListener("input", redraw);
  follow.addEventListener("change", () => { if (follow.checked) view.scrollTop = view.scrollHeight; });

  function receive(event) {
    if (event.type === "log.backlog") {
      // the first connect, or a reconnect too far behind to catch up line by line
      if (cursor) state.textContent = "Reconnected: lines of the gap are in Download";
      event.streams.forEach(addStream);
      event.lines.forEach(add);
      lines.sort((a, b) => a.ts - b.ts);
      redraw();
    } else if (event.type === "log.append") {
      event.streams?.forEach(addStream);
      append(event.lines.map(add));
    } else {
      return;
    }
    cursor = event.cursor;
  }

  const socket = LiveSocket.open(
    () => `/ws/jobs/${meta.id}/logs/${cursor ? `?after=${encodeURIComponent(cursor)}` : ""}`,
    {
      open() { state.textContent = connectedText(); },
      message: receive,
      retry() { state.textContent = "Reconnecting…"; },
      refused(code) {
        state.textContent = code === LiveSocket.NOT_FOUND ? "Not live: this job was deleted" : "Not live: log in again";
      },
    },
  );
  document.addEventListener("job-gone", () => {
    socket.stop();
    state.textContent = "Not live: this job was deleted";
  });
  document.addEventListener("job-event", (e) => {
    const event = e.detail;
    if (event.type !== "job.status" || !meta.terminal_statuses.includes(event.status)) return;
    ended = event.status;
    if (state.textContent === "Live") state.textContent = connectedText();
  });
})();
