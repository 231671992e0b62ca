// The queue page's live throughput chart: polls the queue's counters every second and plots the rates
// (messages produced and consumed per second) with uPlot, the last two minutes.
(function () {
  const box = document.getElementById("throughput");
  if (!box || !window.uPlot) return;
  const url = box.dataset.url, points = 120;
  const data = [[], [], []];
  const chart = new uPlot({
    width: Math.min(box.clientWidth || 800, 1000), height: 220,
    series: [{}, {label: "produced / s", stroke: "#0b6bcb"}, {label: "consumed / s", stroke: "#067647"}],
    axes: [{}, {size: 60}],
  }, data, box);
  let previous = null;
  async function tick() {
    try {
      const answer = await fetch(url, {headers: {"Accept": "application/json"}});
      if (!answer.ok) return;
      const now = await answer.json();
      if (previous) {
        const seconds = (now.t - previous.t) || 1;
        data[0].push(now.t);
        data[1].push(Math.max(0, (now.produced - previous.produced) / seconds));
        data[2].push(Math.max(0, (now.consumed - previous.consumed) / seconds));
        if (data[0].length > points) data.forEach(series => series.shift());
        chart.setData(data);
        box.dataset.produced = data[1][data[1].length - 1].toFixed(1);
        box.dataset.consumed = data[2][data[2].length - 1].toFixed(1);
      }
      previous = now;
    } catch (e) { /* the next tick tries again */ }
  }
  tick();
  setInterval(tick, 1000);
})();
