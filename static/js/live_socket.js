// The console's browser WebSockets: reconnect with backoff after a drop, and stop for good on
// the close codes a refusal carries — 4401 (the session ended) and 4404 (the job is gone), as in
// console/lib/sockets.py — saying why on the page instead of retrying forever.
(function () {
  const SESSION_ENDED = 4401;
  const NOT_FOUND = 4404;

  // A banner at the top of the page; one per `id`, however many sockets report it.
  function notice(id, text, link) {
    if (document.getElementById(id)) return;
    const box = document.createElement("p");
    box.id = id;
    box.className = "error-box live-notice";
    box.setAttribute("role", "alert");
    box.textContent = `${text} `;
    if (link) {
      const a = document.createElement("a");
      a.href = link.href;
      a.textContent = link.text;
      box.appendChild(a);
    }
    document.querySelector("main").prepend(box);
  }

  function sessionEnded() {
    const login = document.body.dataset.loginUrl || "/login/";
    notice("session-ended", "Your session ended: log in again to see live updates.",
      { href: `${login}?next=${encodeURIComponent(location.pathname + location.search)}`, text: "Log in" });
  }

  // open(path, handlers): `path` is a string or a function (read at every reconnect);
  // handlers.message(event), .open(), .retry() (dropped; reconnecting), .refused(code) (stopped).
  // Returns { stop() }: close and never reconnect.
  function open(path, handlers) {
    let delay = 1000;
    let socket = null;
    let stopped = false;
    let retry = null;  // the pending reconnect: stop() cancels it
    function connect() {
      if (stopped) return;
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      socket = new WebSocket(`${scheme}://${location.host}${typeof path === "function" ? path() : path}`);
      // a socket stopped meanwhile says nothing more: a refusal opens before it closes, and
      // its "open" would put back "Live" on a page that already said why it stopped
      socket.addEventListener("open", () => { if (stopped) return; delay = 1000; if (handlers.open) handlers.open(); });
      socket.addEventListener("message", (e) => { if (!stopped) handlers.message(JSON.parse(e.data)); });
      socket.addEventListener("close", (e) => {
        if (stopped) return;
        if (e.code === SESSION_ENDED || e.code === NOT_FOUND) {
          stopped = true;
          if (e.code === SESSION_ENDED) sessionEnded();
          if (handlers.refused) handlers.refused(e.code);
          return;
        }
        if (handlers.retry) handlers.retry();
        retry = setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      });
    }
    connect();
    return { stop() { stopped = true; clearTimeout(retry); if (socket) socket.close(); } };
  }

  window.LiveSocket = { open, notice, SESSION_ENDED, NOT_FOUND };
})();
