// Training Job list: select rows, delete them after a confirm dialog, and stay live: every
// status change of the user's jobs arrives on /ws/jobs/ (the same events as the job page).
(function () {
  const form = document.getElementById("bulk-delete");
  const rows = document.getElementById("job-rows");
  const boxes = () => Array.from(form.querySelectorAll('input[name="ids"]'));
  const button = document.getElementById("delete-selected");
  const dialog = document.getElementById("confirm-delete");
  const state = document.getElementById("list-state");
  const filter = new URLSearchParams(location.search).get("status") || "";
  const refresh = () => { button.disabled = !boxes().some((b) => b.checked); };
  document.getElementById("select-all").addEventListener("change", (e) => {
    boxes().forEach((b) => { b.checked = e.target.checked; });
    refresh();
  });
  form.addEventListener("change", refresh);
  button.addEventListener("click", () => {
    document.getElementById("delete-count").textContent = boxes().filter((b) => b.checked).length;
    dialog.showModal();
  });
  document.getElementById("cancel-delete").addEventListener("click", () => dialog.close());
  document.getElementById("confirm-delete-button").addEventListener("click", () => form.submit());

  // A job that came, went, or left the filtered view: fetch this page's rows again (the
  // server applies the filters and the page); what was ticked stays ticked. One fetch at a
  // time: two in flight may answer out of order, and an answer rendered before a later event
  // must not overwrite what that event said; an event meanwhile asks for one more fetch after.
  let reloadTimer = null;
  let fetching = false;
  let again = false;
  function reloadRows() {
    if (fetching) {
      again = true;
      return;
    }
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(fetchRows, 200);
  }

  async function fetchRows() {
    fetching = true;
    again = false;
    try {
      const response = await fetch(`${rows.dataset.rowsUrl}${location.search}`, { credentials: "same-origin" });
      if (response.ok) {
        const html = await response.text();
        const ticked = new Set(boxes().filter((b) => b.checked).map((b) => b.value));
        rows.innerHTML = html; // server-rendered and escaped, like the first page
        boxes().forEach((b) => { b.checked = ticked.has(b.value); });
        refresh();
      }
    } catch {
      // the console is away: the socket's reconnect fetches the rows again
    } finally {
      fetching = false;
      if (again) reloadRows();
    }
  }

  function apply(event) {
    const row = rows.querySelector(`tr[data-job-id="${event.job_id}"]`);
    if (!row || event.status === "Deleted" || (filter && filter !== event.status)) {
      if (row && event.status === "Deleted") row.remove();
      reloadRows();
      return;
    }
    const badge = row.querySelector(".status");
    badge.textContent = event.status;
    badge.dataset.status = event.status;
    row.querySelector(".status-reason").textContent = event.reason;
    if (fetching) again = true; // the rows on their way may predate this event
  }

  let dropped = false;
  LiveSocket.open("/ws/jobs/", {
    open() {
      state.textContent = "Live";
      if (dropped) reloadRows(); // changes made while the socket was down
    },
    message(event) {
      if (event.type === "job.status" || event.type === "job.reason") apply(event);
    },
    retry() {
      dropped = true;
      state.textContent = "Reconnecting…";
    },
    refused() { state.textContent = "Not live: log in again"; },
  });
})();
