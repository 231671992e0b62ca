// Every <time datetime="..."> of the console in the viewer's own time zone, with a relative time beside it
// ("5 min ago", "in 2 days"); the UTC time stays in its title. Pieces HTMX puts in later are done too.
(function () {
  const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "short" });
  const steps = [[60, "second"], [60, "minute"], [24, "hour"], [30, "day"], [12, "month"], [Infinity, "year"]];

  function ago(ms) {
    let amount = ms / 1000;
    for (const [size, unit] of steps) {
      if (Math.abs(amount) < size) return relative.format(Math.round(amount), unit);
      amount /= size;
    }
    return "";
  }

  function show(root) {
    for (const element of root.querySelectorAll("time[datetime]:not([data-shown])")) {
      const moment = new Date(element.getAttribute("datetime"));
      if (isNaN(moment)) continue;
      const precise = element.hasAttribute("data-precise");
      const local = new Intl.DateTimeFormat(undefined, {
        year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
        second: precise ? "2-digit" : undefined, fractionalSecondDigits: precise ? 3 : undefined,
        hour12: false, timeZoneName: "short",
      }).format(moment);
      element.title = element.textContent.trim();
      element.textContent = local;
      element.dataset.shown = "";
      const beside = document.createElement("span");
      beside.className = "muted when-relative";
      beside.textContent = " · " + ago(moment.getTime() - Date.now());
      element.after(beside);
    }
  }

  document.addEventListener("DOMContentLoaded", () => show(document));
  document.addEventListener("htmx:afterSwap", (event) => show(event.target));
})();
