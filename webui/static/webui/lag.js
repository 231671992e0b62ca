// A group's lag over time: messages (max and p95) and seconds (max and p95), one point per step, from the page.
(function () {
  const box = document.getElementById("lag-charts");
  const source = document.getElementById("lag-series");
  if (!box || !source || !window.uPlot) return;
  const series = JSON.parse(source.textContent);
  const times = series.map(p => Date.parse(p.start) / 1000);
  const width = Math.min(Math.max((box.clientWidth || 900) / 2 - 16, 280), 560);
  const step = Number(box.dataset.step || 60);  // one point's width either side, so a single point has room
  const chart = (title, max, p95) => new uPlot({
    title: title, width: width, height: 200,
    scales: {x: {time: true, range: (u, min, max) => [min - step, max + step]}},
    series: [{}, {label: "max", stroke: "#b42318"}, {label: "p95", stroke: "#0b6bcb"}], axes: [{}, {size: 70}],
  }, [times, series.map(p => p[max]), series.map(p => p[p95])], box);
  chart("lag (messages)", "lag_max", "lag_p95");
  chart("lag (seconds)", "lag_seconds_max", "lag_seconds_p95");
  box.dataset.charts = 2;
})();
