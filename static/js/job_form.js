// Training Job creation page: allocation choices per server type, live summary, confirm dialog.
(function () {
  const form = document.getElementById("job-form");
  const types = JSON.parse(document.getElementById("server-types").textContent);
  const $ = (name) => form.elements[name];
  const value = (name) => {
    const el = $(name);
    if (!el) return "";
    if (el instanceof RadioNodeList) return el.value;
    return el.type === "checkbox" ? el.checked : el.value;
  };
  const labelOf = (name) => {
    const el = $(name);
    if (el instanceof RadioNodeList) {
      const checked = Array.from(el).find((r) => r.checked);
      return checked ? checked.closest("label").querySelector("b").textContent : "";
    }
    return el.options ? (el.options[el.selectedIndex] || {}).text || "" : el.value;
  };

  function allocationOptions() {
    const type = types[value("server_type")];
    const select = $("gpus_per_node");
    const current = select.value;
    select.innerHTML = "";
    (type ? type.allocations : []).forEach((a) => {
      const option = new Option(`${a.name} — ${a.gpus} GPU · ${a.vcpus} vCPU · ${a.memory_gb.toLocaleString("en-US")} GB`, a.gpus);
      select.add(option);
    });
    if (Array.from(select.options).some((o) => o.value === current)) select.value = current;
  }

  function allocation() {
    const type = types[value("server_type")];
    return type && type.allocations.find((a) => String(a.gpus) === String(value("gpus_per_node")));
  }

  function versions() {
    const framework = value("framework");
    const select = $("framework_version");
    Array.from(select.options).forEach((o) => {
      const matches = o.text.toLowerCase().startsWith(framework === "deepspeed" ? "deepspeed" : "pytorch");
      o.hidden = !matches;
      o.disabled = !matches;
    });
    if (select.selectedOptions[0] && select.selectedOptions[0].disabled) {
      const first = Array.from(select.options).find((o) => !o.disabled);
      if (first) select.value = first.value;
    }
  }

  // The seed: "Spot Training cannot be used with Job Failover". Choosing one disables the
  // other here, with that sentence beside it, so the server's refusal is never needed.
  function exclusiveChoices() {
    const spotRadio = form.querySelector('input[name="learning_type"][value="spot"]');
    const failover = $("failover_enabled");
    const spot = value("learning_type") === "spot";
    if (spot) failover.checked = false;
    failover.disabled = spot;
    spotRadio.disabled = !spot && failover.checked;
    document.getElementById("failover-conflict").hidden = !failover.disabled;
    document.getElementById("spot-conflict").hidden = !spotRadio.disabled;
  }

  function price() {
    if (value("workspace")) return "$0.00 (workspace contract)";
    const type = types[value("server_type")];
    const nodes = parseInt(value("node_count"), 10) || 0;
    const gpus = parseInt(value("gpus_per_node"), 10) || 0;
    if (!type || !nodes || !gpus) return null;
    const perGpu = parseFloat(value("learning_type") === "spot" ? type.spot : type.on_demand);
    return "$" + (perGpu * gpus * nodes).toFixed(2);
  }

  function summary() {
    const a = allocation();
    document.getElementById("memory-display").textContent = a ? `${a.memory_gb.toLocaleString("en-US")} GB` : "—";
    document.getElementById("storage-fields").hidden = !value("use_storage");
    const tags = Array.from(form.querySelectorAll(".tag-row")).filter((r) => r.querySelector('[name="tag_key"]').value.trim()).length;
    const rows = [
      ["Learning type", labelOf("learning_type")],
      ["Name", value("name") || "—"],
      ["Framework", labelOf("framework_version").split(" — ")[0]],
      ["Job Failover", value("failover_enabled") ? "Use" : "Not used"],
      ["Server type", value("server_type")],
      ["Resource allocation", a ? `${a.name} (${a.gpus} GPU, ${a.memory_gb.toLocaleString("en-US")} GB)` : "—"],
      ["Number of nodes", value("node_count")],
      ["Shared memory", `${value("shm_size_gb")} GB`],
      ["Image", value("image_url") || "—"],
      ["Registry user", value("registry_username") || "—"],
      ["Volume mount path", value("use_storage") ? value("volume_mount_path") || "—" : "Not used"],
      ["Training script", value("use_storage") ? value("script_url") || "—" : "Not used"],
      ["Command", value("command") || "—"],
      ["Training Workspace", value("workspace") || "None (shared pool)"],
      ["Keep nodes warm", `${value("keep_alive_minutes") || 10} min`],
      ["Tags", String(tags)],
    ];
    const list = document.getElementById("summary-list");
    list.replaceChildren(...rows.flatMap(([k, v]) => {
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = v;
      return [dt, dd];
    }));
    document.getElementById("summary-price").textContent = price() || "—";
  }

  function addTag() {
    const rows = document.getElementById("tag-rows");
    if (rows.children.length >= 50) return;
    rows.appendChild(document.getElementById("tag-row-template").content.cloneNode(true));
  }

  form.addEventListener("click", (e) => {
    if (e.target.classList.contains("remove-tag")) { e.target.closest(".tag-row").remove(); summary(); }
  });
  document.getElementById("add-tag").addEventListener("click", () => { addTag(); summary(); });
  form.addEventListener("input", summary);
  form.addEventListener("change", (e) => {
    if (e.target.name === "server_type") allocationOptions();
    if (e.target.name === "framework") versions();
    if (e.target.name === "learning_type" || e.target.name === "failover_enabled") exclusiveChoices();
    summary();
  });
  const dialog = document.getElementById("confirm-create");
  const confirmCreate = () => {
    document.getElementById("confirm-name").textContent = value("name");
    document.getElementById("confirm-price").textContent = price() || "—";
    dialog.showModal();
  };
  document.getElementById("create-button").addEventListener("click", confirmCreate);
  // Enter in a field must not skip the confirmation
  form.addEventListener("submit", (e) => { if (!dialog.open) { e.preventDefault(); confirmCreate(); } });
  document.getElementById("cancel-create").addEventListener("click", () => dialog.close());

  // "Create a Training Job in this workspace" links here with ?workspace=NAME
  const wanted = new URLSearchParams(window.location.search).get("workspace");
  if (wanted && $("workspace") && Array.from($("workspace").options).some((o) => o.value === wanted)) $("workspace").value = wanted;
  allocationOptions();
  versions();
  exclusiveChoices();
  summary();
})();
