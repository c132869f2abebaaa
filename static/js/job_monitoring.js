// Monitoring tab: plotly charts of a job's metrics from /api/v1/training-jobs/<id>/metrics/,
// kept live by the `job.metrics` events job_detail.js receives on the job's WebSocket.
// plotly.js (4.6 MB) is loaded only when the tab is first shown.
(function () {
  const panel = document.querySelector('[data-panel="monitoring"]');
  const meta = JSON.parse(document.getElementById("metrics-meta").textContent);
  const job = JSON.parse(document.getElementById("job-meta").textContent);
  let ended = job.ended ? job.status : ""; // an ended job's charts are not "Live"
  const catalogue = {};
  JSON.parse(document.getElementById("metric-catalogue").textContent).forEach((m) => { catalogue[m.name] = m; });
  const OVERVIEW = ["GPUUtilization", "GPUMemoryUsed", "GPUTemperature", "GPUPowerDraw", "TrainingLoss", "TrainingLearningRate"];
  const GPU_METRICS = Object.values(catalogue).filter((m) => m.scope === "gpu").map((m) => m.name);
  const PERIODS = [10, 60, 300, 3600, 21600, 86400];
  const UNITS = { Percent: "%", Gigabytes: "GiB", Celsius: "°C", Watts: "W", Megahertz: "MHz", "Megabytes/Second": "MB/s", "Count/Second": "/s", Count: "", None: "" };
  const COLORS = ["#2457d6", "#d6452f", "#1f8a4c", "#b7791f", "#7b3fc4", "#0f8a9d", "#c43f8e", "#5d6b82"];

  const el = (id) => document.getElementById(id);
  const view = { range: 3600, start: null, end: null, statistic: "", device: "" };
  const charts = {}; // metric → {div, period, lines: Map(key → {label, dims, t[], v[], n[]})}
  let plotly = null;
  let generation = 0; // a reload started later wins over slower answers of an earlier one
  let redrawTimer = null;
  let newNodeTimer = null;

  function loadPlotly() {
    if (!plotly) {
      plotly = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = meta.plotly;
        script.onload = () => resolve(window.Plotly);
        script.onerror = () => reject(new Error("plotly.js could not be loaded"));
        document.head.appendChild(script);
      });
    }
    return plotly;
  }

  const periodFor = (seconds) => PERIODS.find((p) => seconds / p <= 360) || 86400;
  const lineKey = (dims) => ("gpu" in dims ? `${dims.node}/${dims.gpu}` : dims.stream || dims.node || "");
  // nodes whose GPUs are simulated (the API says so per line): their lines and charts say so too
  const simulatedNodes = new Set();
  const seenNodes = new Set();
  const lineLabel = (dims) => ("gpu" in dims ? `${dims.node} GPU ${dims.gpu}${simulatedNodes.has(dims.node) ? " (simulated)" : ""}` : dims.stream || dims.node || "");
  const statisticOf = (metric) => view.statistic || catalogue[metric].primary;
  function localTime(seconds) { // plotly draws date strings as they are: show the browser's time
    const date = new Date(seconds * 1000);
    return new Date(date.getTime() - date.getTimezoneOffset() * 60000).toISOString().slice(0, 19).replace("T", " ");
  }
  function rangeNow() {
    if (view.start !== null) return [view.start, view.end];
    // an ended job's range ends when it ended, so a job that finished yesterday still shows its run
    const end = job.ended_at ? Math.min(Date.now() / 1000, job.ended_at + 60) : Date.now() / 1000;
    return [end - view.range, end];
  }
  const emptyText = () => (view.start === null && !ended ? "No data yet" : "No data in this range");
  // what a training chart without data needs: one line of the script's output (docs: Metrics)
  const SCRIPT_KEYS = { TrainingLoss: "loss", TrainingEvalLoss: "eval_loss", TrainingLearningRate: "learning_rate", TrainingGradNorm: "grad_norm", TrainingThroughput: "throughput", TrainingStep: "step", TrainingEpoch: "epoch" };
  function emptyHint(metric) {
    const key = SCRIPT_KEYS[metric];
    if (!key) return "";
    const example = key === "step" ? '{"step": 10}' : `{"step": 10, "${key}": 0.5}`;
    return `Your script reports it by printing a line<br>SIMPLEAI_METRIC ${example}`;
  }
  const isSimulated = (metric) => catalogue[metric].scope === "gpu" && simulatedNodes.size > 0;

  const chartPeriod = (metric) => (charts[metric] ? charts[metric].period : periodFor(view.range));

  function chartMetrics() {
    if (view.device) return GPU_METRICS;
    return OVERVIEW;
  }

  function layout(metric, empty) {
    const info = catalogue[metric];
    const unit = UNITS[info.unit] ?? info.unit;
    // without points plotly would still draw "00:00:00" on every tick and a "0" that collides
    // with them: an empty chart shows only its title and what is missing
    const axes = empty
      ? { xaxis: { visible: false }, yaxis: { visible: false } }
      : {
        // times without the date line plotly adds under the first tick (it collides with the y axis)
        // labels a little below the axis, so the first time is not drawn into the y axis's "0"
        xaxis: { type: "date", showgrid: false, ticklabelstandoff: 8, tickformat: view.range > 86400 ? "%b %d %H:%M" : chartPeriod(metric) < 60 ? "%H:%M:%S" : "%H:%M" },
        yaxis: { rangemode: "tozero", zeroline: false, gridcolor: "#eef1f6", exponentformat: info.unit === "None" ? "e" : "SI" },
      };
    return {
      title: { text: `${info.label}${unit ? ` (${unit})` : ""} · ${statisticOf(metric)}${isSimulated(metric) ? " · simulated" : ""}`, font: { size: 14 }, x: 0.02 },
      margin: { l: 56, r: 16, t: 40, b: 36 }, height: 260, showlegend: true,
      legend: { orientation: "h", y: -0.18, font: { size: 11 } },
      ...axes,
      uirevision: `${metric}/${view.device}`, // keep the user's zoom across live updates
      annotations: empty ? [
        { text: emptyText(), showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.6, font: { color: "#6b7587", size: 14 } },
        ...(emptyHint(metric) ? [{ text: emptyHint(metric), showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.3, font: { color: "#6b7587", size: 12 } }] : []),
      ] : [],
    };
  }

  function traces(chart) {
    const unit = UNITS[catalogue[chart.metric].unit] ?? "";
    return Array.from(chart.lines.values()).map((line, i) => ({
      type: "scatter", mode: line.t.length > 1 ? "lines" : "lines+markers", name: line.label,
      x: line.t.map(localTime), y: line.v, line: { width: 1.6, color: COLORS[i % COLORS.length] },
      hovertemplate: `%{y:.4~g}${unit ? " " + unit : ""}<extra>${line.label}</extra>`,
    }));
  }

  function draw(chart) {
    const data = traces(chart);
    const spec = layout(chart.metric, data.length === 0);
    const times = Array.from(chart.lines.values()).flatMap((line) => line.t);
    if (times.length && Math.min(...times) === Math.max(...times)) {
      // one moment only: plotly would zoom into a second and print it on every tick
      const pad = Math.max(chart.period * 6, 60);
      spec.xaxis.range = [localTime(times[0] - pad), localTime(times[0] + pad)];
    }
    window.Plotly.react(chart.div, data, spec, { displaylogo: false, responsive: true });
    chart.div.dataset.points = String(data.reduce((sum, trace) => sum + trace.x.length, 0));
    chart.div.dataset.empty = String(data.length === 0);
  }

  function addDevice(dims) {
    if (!("gpu" in dims)) return;
    const select = el("metrics-device");
    const value = `${dims.node}/${dims.gpu}`;
    if (Array.from(select.options).some((o) => o.value === value)) return;
    select.add(new Option(`${dims.node} GPU ${dims.gpu} (every metric)`, value));
  }

  async function fetchChart(metric, start, end, period) {
    const params = new URLSearchParams({ metric, statistic: statisticOf(metric), period, start: start.toFixed(3), end: end.toFixed(3) });
    if (view.device) {
      const [node, gpu] = view.device.split("/");
      params.set("node", node);
      params.set("gpu", gpu);
    }
    const response = await fetch(`${meta.api}?${params}`, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    const body = await response.json();
    if (!response.ok) throw new Error(Object.values(body).flat().join(" ") || response.statusText);
    return body;
  }

  async function reload() {
    const mine = ++generation;
    const [start, end] = rangeNow();
    const period = periodFor(end - start);
    el("metrics-state").textContent = "Loading…";
    el("metrics-error").hidden = true;
    let Plotly;
    try {
      Plotly = await loadPlotly();
    } catch (error) {
      el("metrics-error").textContent = error.message;
      el("metrics-error").hidden = false;
      return;
    }
    const container = el("metrics-charts");
    const metrics = chartMetrics();
    Object.keys(charts).forEach((metric) => { Plotly.purge(charts[metric].div); delete charts[metric]; });
    container.replaceChildren(...metrics.map((metric) => {
      const div = document.createElement("div");
      div.className = "chart";
      div.dataset.metric = metric;
      charts[metric] = { metric, div, period, lines: new Map() };
      return div;
    }));
    try {
      const answers = await Promise.all(metrics.map((metric) => fetchChart(metric, start, end, period)));
      if (mine !== generation) return;
      answers.forEach((answer) => answer.series.forEach((line) => {
        if (line.dimensions.node) seenNodes.add(line.dimensions.node);
        if (line.simulated) simulatedNodes.add(line.dimensions.node);
      }));
      showSimulated();
      answers.forEach((answer) => {
        const chart = charts[answer.metric];
        answer.series.forEach((line) => {
          addDevice(line.dimensions);
          chart.lines.set(lineKey(line.dimensions), {
            label: line.label, dims: line.dimensions,
            t: line.points.map((p) => Date.parse(p.timestamp) / 1000), v: line.points.map((p) => p.value), n: line.points.map((p) => p.sample_count),
          });
        });
        draw(chart);
      });
      showState(period);
    } catch (error) {
      if (mine !== generation) return;
      el("metrics-error").textContent = `Metrics could not be loaded: ${error.message}`;
      el("metrics-error").hidden = false;
      el("metrics-state").textContent = "";
    }
  }

  function showSimulated() {
    const note = el("metrics-simulated");
    note.hidden = simulatedNodes.size === 0;
    el("metrics-simulated-nodes").textContent = Array.from(simulatedNodes).sort().join(", ");
  }

  function showState(period) {
    const perPoint = `${period >= 60 ? period / 60 + " min" : period + " s"} per point`;
    if (ended) el("metrics-state").textContent = `${perPoint} · job ${ended}, no new samples`;
    else el("metrics-state").textContent = view.start === null ? `Live · ${perPoint}` : perPoint;
  }

  // -- live samples: merged into the period they fall in, exactly as the server would -------------
  function merge(line, index, value, statistic) {
    const n = line.n[index];
    const old = line.v[index];
    line.v[index] = {
      Average: (old * n + value) / (n + 1), Minimum: Math.min(old, value), Maximum: Math.max(old, value),
      Sum: old + value, SampleCount: n + 1,
    }[statistic];
    line.n[index] = n + 1;
  }

  function addSample(chart, metric, ts, value, dims) {
    if (view.device && (!("gpu" in dims) || `${dims.node}/${dims.gpu}` !== view.device)) return false;
    const key = lineKey(dims);
    let line = chart.lines.get(key);
    if (!line) {
      line = { label: lineLabel(dims), dims, t: [], v: [], n: [] };
      chart.lines.set(key, line);
    }
    const bucket = Math.floor(ts / chart.period) * chart.period;
    const last = line.t.length - 1;
    const statistic = statisticOf(metric);
    if (last >= 0 && line.t[last] === bucket) {
      merge(line, last, value, statistic);
    } else if (last < 0 || line.t[last] < bucket) {
      line.t.push(bucket);
      line.v.push(statistic === "SampleCount" ? 1 : value);
      line.n.push(1);
    } else {
      const index = line.t.indexOf(bucket);
      if (index < 0) return false; // older than what is drawn: the next load shows it
      merge(line, index, value, statistic);
    }
    const oldest = Date.now() / 1000 - view.range;
    while (line.t.length && line.t[0] + chart.period < oldest) { line.t.shift(); line.v.shift(); line.n.shift(); }
    return true;
  }

  document.addEventListener("job-event", (e) => {
    const event = e.detail;
    if (event.type === "job.status" && job.terminal_statuses.includes(event.status)) {
      ended = event.status;
      const chart = Object.values(charts)[0];
      if (chart) showState(chart.period);
      return;
    }
    if (event.type !== "job.metrics" || view.start !== null || !Object.keys(charts).length || !window.Plotly) return;
    const changed = new Set();
    event.samples.forEach(([metric, ts, value, dims]) => {
      addDevice(dims);
      if ("gpu" in dims && !seenNodes.has(dims.node)) { // a node not seen yet: ask the API whether it is simulated
        seenNodes.add(dims.node);
        clearTimeout(newNodeTimer);
        newNodeTimer = setTimeout(reload, 1000);
      }
      const chart = charts[metric];
      if (chart && addSample(chart, metric, ts, value, dims)) changed.add(chart);
    });
    changed.forEach((chart) => { chart.dirty = true; });
    if (panel.hidden) return; // drawn when the tab is shown again
    // several events a second (one per node and stream): redraw at most every 250 ms
    if (!redrawTimer) {
      redrawTimer = setTimeout(() => {
        redrawTimer = null;
        Object.values(charts).filter((c) => c.dirty).forEach((c) => { c.dirty = false; draw(c); });
      }, 250);
    }
  });

  // -- controls --------------------------------------------------------------------------------
  function toInput(seconds) { return localTime(seconds).replace(" ", "T").slice(0, 16); }
  el("metrics-range").addEventListener("click", (e) => {
    const button = e.target.closest("button");
    if (!button) return;
    el("metrics-range").querySelectorAll("button").forEach((b) => b.classList.toggle("active", b === button));
    if (button.dataset.range === "custom") {
      const [start, end] = rangeNow();
      el("metrics-start").value = el("metrics-start").value || toInput(start);
      el("metrics-end").value = el("metrics-end").value || toInput(end);
      el("metrics-custom").hidden = false;
      return;
    }
    el("metrics-custom").hidden = true;
    Object.assign(view, { range: Number(button.dataset.range), start: null, end: null });
    reload();
  });
  el("metrics-apply").addEventListener("click", () => {
    const start = Date.parse(el("metrics-start").value) / 1000;
    const end = Date.parse(el("metrics-end").value) / 1000;
    if (!(end > start)) {
      el("metrics-error").textContent = "The end of a custom range must be after its start.";
      el("metrics-error").hidden = false;
      return;
    }
    Object.assign(view, { start, end, range: end - start });
    reload();
  });
  el("metrics-statistic").addEventListener("change", (e) => { view.statistic = e.target.value; reload(); });
  el("metrics-device").addEventListener("change", (e) => {
    view.device = e.target.value;
    el("metrics-note").textContent = view.device
      ? "Every metric of this GPU, at its primary statistic."
      : "Key metrics at their primary statistic, one line per GPU; training metrics one line per stream. Charts follow new samples live while the job runs.";
    reload();
  });

  let started = false;
  function show() {
    if (!started) { started = true; reload(); return; }
    // charts drawn while hidden have no width: let plotly measure again
    Object.values(charts).forEach((c) => { if (c.dirty) { c.dirty = false; draw(c); } else if (window.Plotly) window.Plotly.Plots.resize(c.div); });
  }
  document.addEventListener("tab-shown", (e) => { if (e.detail === "monitoring") show(); });
  if (!panel.hidden) show();
})();
