// Draw the usage charts from the JSON the page embeds (no inline script: a strict CSP stays possible).
document.addEventListener("DOMContentLoaded", () => {
  const data = JSON.parse(document.getElementById("usage-data").textContent);
  for (const [name, series] of Object.entries(data)) {
    const canvas = document.getElementById(`chart-${name}`);
    if (!canvas) continue;
    new Chart(canvas, {
      type: name === "month" ? "line" : "bar",
      data: { labels: series.labels, datasets: [{ label: "cost", data: series.values, backgroundColor: "#0b5ed7", borderColor: "#0b5ed7" }] },
      options: { animation: false, plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true } } },
    });
  }
});
