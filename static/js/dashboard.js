// Service dashboard: one plotly sparkline of GPU utilisation per running job (data in the page).
(function () {
  const sparks = JSON.parse(document.getElementById("sparks").textContent);
  const cells = document.querySelectorAll("[data-spark]");
  if (!cells.length) return;
  const meta = JSON.parse(document.getElementById("dashboard-meta").textContent);
  const script = document.createElement("script");
  script.src = meta.plotly;
  script.onload = () => cells.forEach((cell) => {
    const points = sparks[cell.dataset.spark] || [];
    if (!points.length) { cell.textContent = "no samples yet"; cell.classList.add("muted"); return; }
    window.Plotly.newPlot(cell, [{
      type: "scatter", mode: "lines", x: points.map((p) => new Date(p[0] * 1000)), y: points.map((p) => p[1]),
      line: { width: 1.5, color: "#2457d6" }, fill: "tozeroy", fillcolor: "rgba(36,87,214,.12)",
    }], {
      margin: { l: 0, r: 0, t: 2, b: 2 }, height: 44, width: 180, showlegend: false,
      xaxis: { visible: false }, yaxis: { visible: false, range: [0, 100] },
    }, { staticPlot: true, displayModeBar: false });
  });
  document.head.appendChild(script);
})();
