// The job page's GPU chart: utilisation (%) and memory (MiB) of each GPU over time, the idle stretches shaded.
// Drawn from the JSON in the canvas's data-series, again each time htmx swaps the section in (no inline script: CSP).
(() => {
  let chart = null;
  let drawn = null; // the canvas last drawn: htmx replaces it each time it swaps the section in
  const shade = {
    id: "idleShade",
    beforeDatasetsDraw(c, _args, options) {
      const { ctx, chartArea, scales } = c;
      ctx.save();
      ctx.fillStyle = "rgba(255, 193, 7, 0.25)";
      for (const [start, end] of options.periods || []) {
        const left = Math.max(scales.x.getPixelForValue(start), chartArea.left);
        const right = Math.min(scales.x.getPixelForValue(end), chartArea.right);
        if (right > left) ctx.fillRect(left, chartArea.top, right - left, chartArea.bottom - chartArea.top);
      }
      ctx.restore();
    },
  };
  const clock = (t) => new Date(t * 1000).toISOString().slice(11, 19);
  function draw() {
    const canvas = document.getElementById("gpu-chart");
    if (!canvas || !canvas.dataset.series || canvas === drawn || typeof Chart === "undefined") return;
    drawn = canvas;
    const data = JSON.parse(canvas.dataset.series);
    const datasets = [];
    data.gpus.forEach((gpu, i) => {
      const hue = (i * 67) % 360;
      datasets.push({ label: `${gpu.device} %`, data: gpu.util.map(([x, y]) => ({ x, y })), yAxisID: "y",
                      borderColor: `hsl(${hue} 70% 40%)`, pointRadius: 0, borderWidth: 1.5, spanGaps: false });
      datasets.push({ label: `${gpu.device} MiB`, data: gpu.memory.map(([x, y]) => ({ x, y })), yAxisID: "mem",
                      borderColor: `hsl(${hue} 70% 40%)`, borderDash: [4, 3], pointRadius: 0, borderWidth: 1,
                      hidden: data.gpus.length > 4 });
    });
    if (chart) chart.destroy();
    canvas.dataset.gpus = String(data.gpus.length);
    canvas.dataset.idlePeriods = String(data.idle.length);
    chart = new Chart(canvas, {
      type: "line",
      data: { datasets },
      plugins: [shade],
      options: {
        animation: false, parsing: false, normalized: true,
        plugins: { idleShade: { periods: data.idle }, legend: { labels: { boxWidth: 12 } } },
        scales: {
          x: { type: "linear", ticks: { callback: clock, maxTicksLimit: 8 } },
          y: { min: 0, max: 100, title: { display: true, text: "utilisation %" } },
          mem: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
                 title: { display: true, text: "memory MiB" } },
        },
      },
    });
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();
