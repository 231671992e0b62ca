// The usage page's charts: one per unit (messages, bytes, requests), a line per metric, from the series in the page.
(function () {
  const box = document.getElementById("usage-charts");
  const source = document.getElementById("usage-series");
  if (!box || !source || !window.uPlot) return;
  const series = JSON.parse(source.textContent);
  const groups = {messages: ["messages_in", "messages_out"], bytes: ["bytes_in", "bytes_out"],
                  requests: ["requests", "gateway_requests"]};
  const colours = ["#0b6bcb", "#067647"];
  const times = [...new Set(series.map(p => Date.parse(p.start) / 1000))].sort((a, b) => a - b);
  let drawn = 0;
  for (const [title, metrics] of Object.entries(groups)) {
    const present = metrics.filter(m => series.some(p => p.metric === m));
    if (!present.length) continue;
    const data = [times, ...present.map(m => times.map(t => {
      const point = series.find(p => p.metric === m && Date.parse(p.start) / 1000 === t);
      return point ? point.value : 0;
    }))];
    const step = Number(box.dataset.step || 86400);  // one bucket: a day or an hour, so a single point has room
    new uPlot({title: title, width: Math.min(Math.max((box.clientWidth || 900) / 2 - 16, 280), 560), height: 200,
               scales: {x: {time: true, range: (u, min, max) => [min - step / 2, max + step / 2]}},
               series: [{}, ...present.map((m, i) => ({label: m, stroke: colours[i % 2]}))], axes: [{}, {size: 70}]},
              data, box);
    drawn += 1;
  }
  box.dataset.charts = drawn;
})();
