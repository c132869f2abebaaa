// Training Workspace creation: allocation choices per server type, the summary panel with the
// estimated billing amount, and the confirm dialog. The arithmetic mirrors workspaces/pricing.py
// in integers (ten-thousandths of a dollar), so the page shows exactly what the server bills.
(function () {
  const form = document.getElementById("workspace-form");
  const pricing = JSON.parse(document.getElementById("workspace-pricing").textContent);
  const free = JSON.parse(document.getElementById("free-nodes").textContent);
  const $ = (name) => form.elements[name];
  const value = (name) => { const el = $(name); return el ? el.value : ""; };
  const type = () => pricing.server_types[value("server_type")];

  // "3.1000" → 31000 (units of 1/10,000); "20.00" → 2000 (units of 1/100)
  const scaled = (text, places) => {
    const [whole, frac = ""] = String(text).split(".");
    return parseInt(whole, 10) * 10 ** places + parseInt((frac + "0000").slice(0, places), 10);
  };
  const dollars = (e4) => {
    const cents = Math.floor((e4 + 50) / 100); // half up, as Decimal.quantize(ROUND_HALF_UP)
    return "$" + (cents / 100).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  };

  function estimate() {
    const t = type();
    const gpus = parseInt(value("gpus_per_node"), 10) || 0;
    const nodes = parseInt(value("node_count"), 10) || 0;
    const months = parseInt(value("contract_months"), 10) || 0;
    const discount = pricing.terms[String(months)];
    if (!t || !gpus || !nodes || !months || discount === undefined) return null;
    const rate = Math.floor((scaled(t.on_demand, 4) * (10000 - scaled(discount, 2)) + 5000) / 10000);
    const monthly = rate * gpus * nodes * pricing.hours_per_month;
    return { rate, discount, months, monthly: dollars(monthly), total: dollars(monthly * months) };
  }

  function allocationOptions() {
    const t = type();
    const select = $("gpus_per_node");
    const current = select.value;
    select.innerHTML = "";
    (t ? t.allocations : []).forEach((a) => select.add(new Option(`${a.name} — ${a.gpus} GPU · ${a.vcpus} vCPU · ${a.memory_gb.toLocaleString("en-US")} GB`, a.gpus)));
    if (Array.from(select.options).some((o) => o.value === current)) select.value = current;
    else if (select.options.length) select.value = select.options[select.options.length - 1].value;
  }

  function summary() {
    const t = type();
    const a = t && t.allocations.find((x) => String(x.gpus) === value("gpus_per_node"));
    const e = estimate();
    document.getElementById("memory-display").textContent = a ? `${a.memory_gb.toLocaleString("en-US")} GB` : "—";
    document.querySelectorAll(".free-nodes").forEach((span) => {
      const n = free[span.dataset.type] || 0;
      span.textContent = `${n} free node${n === 1 ? "" : "s"} now`;
    });
    const rows = [
      ["Name", value("name") || "—"],
      ["Server type", t ? t.label : "—"],
      ["Resource allocation", a ? `${a.name} (${a.gpus} GPU, ${a.memory_gb.toLocaleString("en-US")} GB)` : "—"],
      ["Number of nodes", value("node_count") || "—"],
      ["Contract period", e ? `${e.months} month${e.months === 1 ? "" : "s"}` : "—"],
      ["Contract discount", e ? `${parseFloat(e.discount)}% off on-demand` : "—"],
      ["Contract rate", e ? `$${(e.rate / 10000).toFixed(4)} per GPU-hour` : "—"],
    ];
    document.getElementById("summary-list").replaceChildren(...rows.flatMap(([k, v]) => {
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = v;
      return [dt, dd];
    }));
    document.getElementById("summary-monthly").textContent = e ? e.monthly : "—";
    document.getElementById("summary-total").textContent = e ? e.total : "—";
  }

  form.addEventListener("input", summary);
  form.addEventListener("change", (e) => {
    if (e.target.name === "server_type") allocationOptions();
    summary();
  });
  const dialog = document.getElementById("confirm-create");
  const confirmCreate = () => {
    const e = estimate();
    const nodes = value("node_count");
    document.getElementById("confirm-name").textContent = value("name");
    document.getElementById("confirm-nodes").textContent = `${nodes} node${nodes === "1" ? "" : "s"}`;
    document.getElementById("confirm-monthly").textContent = e ? e.monthly : "—";
    document.getElementById("confirm-total").textContent = e ? e.total : "—";
    document.getElementById("confirm-months").textContent = e ? `${e.months}-month` : "";
    dialog.showModal();
  };
  document.getElementById("create-button").addEventListener("click", confirmCreate);
  // Enter in a field must not skip the confirmation
  form.addEventListener("submit", (e) => { if (!dialog.open) { e.preventDefault(); confirmCreate(); } });
  document.getElementById("cancel-create").addEventListener("click", () => dialog.close());

  allocationOptions();
  summary();
})();
