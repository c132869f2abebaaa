// Logs tab: backlog then live lines over /ws/jobs/<id>/logs/; stream picker, filter, follow, download.
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
  let delay = 1000;

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

  function add(stream, attempt, seq, ts, text) {
    const key = `${stream}/${attempt}/${seq}`;
    if (seen.has(key)) return null;
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

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/jobs/${meta.id}/logs/`);
    socket.addEventListener("open", () => { delay = 1000; state.textContent = connectedText(); });
    socket.addEventListener("message", (e) => {
      const event = JSON.parse(e.data);
      if (event.type === "log.backlog") {
        event.streams.forEach(addStream);
        event.lines.forEach((l) => add(l.stream, l.attempt, l.seq, l.ts, l.text));
        lines.sort((a, b) => a.ts - b.ts);
        redraw();
      } else if (event.type === "log.lines") {
        append(event.lines.map(([seq, ts, text]) => add(event.stream, event.attempt, seq, ts, text)));
      }
    });
    socket.addEventListener("close", (e) => {
      if (e.code === 4404 || e.code === 4401) { state.textContent = "Not available"; return; }
      state.textContent = "Reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }
  document.addEventListener("job-event", (e) => {
    const event = e.detail;
    if (event.type !== "job.status" || !meta.terminal_statuses.includes(event.status)) return;
    ended = event.status;
    if (state.textContent === "Live") state.textContent = connectedText();
  });
  connect();
})();
