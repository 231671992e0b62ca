// The console's traffic charts (uPlot, served by the app), two of each: messages per second and bytes per second.
//  - data-live: a queue's counters as server-sent events, one a second; two make a rate; the last two minutes shown.
//  - data-hour: a tenant's last hour, one point per minute, fetched every 30 s.
//  - data-history: the id of a JSON script with a queue's figures per hour or day (the range picker's longer spans).
// The latest figures are also written on the element (data-*) so they can be read without the canvas.
(function () {
  const palette = {in: "#0b6bcb", out: "#067647"};

  // Bytes in KiB, MiB, GiB (as the pages write sizes); counts with thousands separators.
  function bytes(value) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let unit = 0;
    while (Math.abs(value) >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return (Number.isInteger(value) ? value : value.toFixed(1)) + " " + units[unit];
  }

  // ``span``: the seconds the x axis always covers, ending at the latest point, so one or two points do not
  // stretch the axis over years (uPlot widens a range of zero width a long way).
  function pair(box, unit, span) {
    const width = Math.min(Math.max((box.clientWidth || 900) / 2 - 16, 280), 560);
    const x = {time: true, range: (u, min, max) => [Math.min(min, max - span), max]};
    const make = (title, format) => new uPlot({
      title: title, width: width, height: 200, scales: {x: x, y: {range: (u, min, max) => [0, Math.max(max, 1)]}},
      series: [{}, {label: "in " + unit, stroke: palette.in, value: (u, v) => v == null ? "" : format(v)},
               {label: "out " + unit, stroke: palette.out, value: (u, v) => v == null ? "" : format(v)}],
      axes: [{}, {size: 80, values: (u, ticks) => ticks.map(format)}],
    }, [[], [], []], box);
    return [make("messages", (v) => v.toLocaleString(undefined, {maximumFractionDigits: 1})), make("bytes", bytes)];
  }

  function live(box) {
    const charts = box.charts = pair(box, "/ s", 120);
    const points = 120, messages = [[], [], []], bytes = [[], [], []];
    let previous = null;
    function add(now) {
      if (now.error) return;
      if (previous) {
        const seconds = (now.t - previous.t) || 1;
        // A counter that went down is a broker that restarted: count from zero, never a negative rate.
        const rate = (field) => Math.max(0, now[field] - previous[field]) / seconds;
        messages[0].push(now.t); bytes[0].push(now.t);
        messages[1].push(rate("messages_in")); messages[2].push(rate("messages_out"));
        bytes[1].push(rate("bytes_in")); bytes[2].push(rate("bytes_out"));
        if (messages[0].length > points) { messages.forEach(s => s.shift()); bytes.forEach(s => s.shift()); }
        charts[0].setData(messages); charts[1].setData(bytes);
        box.dataset.messagesIn = messages[1].at(-1).toFixed(1);
        box.dataset.messagesOut = messages[2].at(-1).toFixed(1);
        box.dataset.bytesIn = bytes[1].at(-1).toFixed(0);
        box.dataset.bytesOut = bytes[2].at(-1).toFixed(0);
      }
      previous = now;
    }
    // Server-sent events, one a second; the server ends a stream after a minute and EventSource reconnects.
    const source = new EventSource(box.dataset.live);
    source.onmessage = (event) => add(JSON.parse(event.data));
    window.addEventListener("pagehide", () => source.close());
  }

  function hour(box) {
    const charts = box.charts = pair(box, "/ min", 3600);
    const sum = (values) => values.reduce((a, b) => a + b, 0);
    async function load() {
      try {
        const answer = await fetch(box.dataset.hour, {headers: {"Accept": "application/json"}});
        if (!answer.ok) return;
        const h = await answer.json();
        charts[0].setData([h.minutes, h.messages_in, h.messages_out]);
        charts[1].setData([h.minutes, h.bytes_in, h.bytes_out]);
        box.dataset.messagesIn = sum(h.messages_in);
        box.dataset.messagesOut = sum(h.messages_out);
        const summary = document.getElementById(box.id + "-summary");
        if (summary) {
          summary.textContent = `Last hour: ${sum(h.messages_in).toLocaleString()} messages in ` +
            `(${bytes(sum(h.bytes_in))}), ${sum(h.messages_out).toLocaleString()} out ` +
            `(${bytes(sum(h.bytes_out))})` +
            (h.missing_brokers ? ` — ${h.missing_brokers} broker(s) did not answer` : "") +
            (h.errors.length ? ` — not reached: ${h.errors.join("; ")}` : "") + ".";
        }
      } catch (e) { /* the next load tries again */ }
    }
    load();
    setInterval(load, 30000);
  }

  function history(box) {
    const h = JSON.parse(document.getElementById(box.dataset.history).textContent);
    const charts = box.charts = pair(box, h.unit, h.span);
    charts[0].setData([h.t, h.messages_in, h.messages_out]);
    charts[1].setData([h.t, h.bytes_in, h.bytes_out]);
    box.dataset.messagesIn = h.messages_in.reduce((a, b) => a + b, 0);
    box.dataset.points = h.t.length;
  }

  if (!window.uPlot) return;
  document.querySelectorAll("[data-history]").forEach(history);
  document.querySelectorAll("[data-live]").forEach(live);
  document.querySelectorAll("[data-hour]").forEach(hour);
})();
