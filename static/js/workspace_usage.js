// Usage page: cost per month stacked by plan (plotly.js, served from this console).
(function () {
  const data = JSON.parse(document.getElementById("usage-data").textContent);
  Plotly.newPlot("usage-chart", data.traces, {
    barmode: "stack",
    margin: { t: 10, r: 10, b: 40, l: 60 },
    yaxis: { title: { text: "Cost (USD)" }, tickprefix: "$", rangemode: "tozero" },
    xaxis: { type: "category" },
    legend: { orientation: "h", y: -0.2 },
  }, { displayModeBar: false, responsive: true });
})();
