// Training Job detail: tabs, in-place tags, delete confirm, live status over the job's WebSocket.
(function () {
  const meta = JSON.parse(document.getElementById("job-meta").textContent);

  document.querySelectorAll(".tabs a").forEach((link) => {
    link.addEventListener("click", (e) => {
      e.preventDefault();
      const tab = link.dataset.tab;
      document.querySelectorAll(".tabs a").forEach((l) => l.classList.toggle("active", l === link));
      document.querySelectorAll(".tab-panel").forEach((p) => { p.hidden = p.dataset.panel !== tab; });
      history.replaceState(null, "", `?tab=${tab}`);
      document.dispatchEvent(new CustomEvent("tab-shown", { detail: tab }));
    });
  });

  const rows = document.getElementById("tag-rows");
  document.getElementById("add-tag").addEventListener("click", () => {
    const empty = document.getElementById("no-tags");
    if (empty) empty.remove();
    if (rows.querySelectorAll(".tag-row").length < 50) {
      rows.appendChild(document.getElementById("tag-row-template").content.cloneNode(true));
    }
  });
  rows.addEventListener("click", (e) => {
    if (e.target.classList.contains("remove-tag")) e.target.closest(".tag-row").remove();
  });

  const dialog = document.getElementById("confirm-delete");
  document.getElementById("delete-job").addEventListener("click", () => dialog.showModal());
  document.getElementById("cancel-delete").addEventListener("click", () => dialog.close());

  // Live status (static/js/live_socket.js reconnects); the page stays correct on reload without it.
  function jobGone() {
    const badge = document.getElementById("job-status");
    badge.textContent = "Deleted";
    badge.dataset.status = "Deleted";
    document.getElementById("job-status-reason").textContent = "";
    document.getElementById("delete-job").disabled = true;
    LiveSocket.notice("job-gone", "This job was deleted.", { href: meta.list_url, text: "Back to Training Jobs" });
    document.dispatchEvent(new CustomEvent("job-gone"));
  }

  // `job.fields` (jobs.actions): the fields below changed; rendered like the template does
  function setText(id, parts) {
    const element = document.getElementById(id);
    if (!element) return;
    element.replaceChildren(...parts.map((part) => {
      if (typeof part === "string") return document.createTextNode(part);
      const code = document.createElement("code");
      code.textContent = part.code;
      return code;
    }));
  }
  function showFields(fields) {
    if ("failover_count" in fields) setText("failover-count", [`${fields.failover_count} of 3`]);
    if ("checkpoint_step" in fields) setText("checkpoint", [`step ${fields.checkpoint_step} `, { code: fields.checkpoint_url }]);
    if ("result_url" in fields) setText("result-url", fields.result_url ? [{ code: fields.result_url }] : ["—"]);
    if ("started_warm" in fields) {
      setText("warm-start", [(fields.started_warm ? "Yes" : "No") + (fields.warm_note ? ` — ${fields.warm_note}` : "")]);
    }
  }

  LiveSocket.open(`/ws/jobs/${meta.id}/`, {
    message(event) {
      document.dispatchEvent(new CustomEvent("job-event", { detail: event }));
      if (event.type === "job.fields") {
        showFields(event.fields);
        return;
      }
      if (event.type === "job.reason") {
        document.getElementById("job-status-reason").textContent = event.reason;
        return;
      }
      if (event.type !== "job.status") return;
      const badge = document.getElementById("job-status");
      badge.textContent = event.status;
      badge.dataset.status = event.status;
      document.getElementById("job-status-reason").textContent = event.reason;
      const row = document.createElement("tr");
      const old = document.querySelector("#history tbody tr:last-child td:nth-child(3)");
      [new Date(event.at).toISOString().replace("T", " ").slice(0, 19), old ? old.textContent : "—", event.status, event.reason]
        .forEach((text) => { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); });
      document.querySelector("#history tbody").appendChild(row);
    },
    refused(code) { if (code === LiveSocket.NOT_FOUND) jobGone(); },
  });
})();
