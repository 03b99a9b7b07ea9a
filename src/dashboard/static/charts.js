// Statistics charts (views/stats.liquid): uPlot, served by the dashboard
// itself, draws the series of the page's JSON data island. Without
// JavaScript the table and the CSV carry the same numbers. The drawn data of
// each chart is kept on window.ploverCharts (the browser tests read it).
(function () {
  if (typeof window.uPlot === 'undefined') return;
  const read = (id) => {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  };
  const line = (label, stroke, extra) => Object.assign({ label, stroke, width: 2, spanGaps: false }, extra || {});
  const definitions = {};
  const stats = read('stats-data');
  const hooks = read('webhook-stats-data');
  if (hooks) {
    const hx = hooks.series.map((p) => Date.parse(p.at) / 1000);
    const hcol = (k) => hooks.series.map((p) => p[k]);
    definitions.attempts = { xs: hx, series: [line('succeeded', '#2e8540'), line('failed', '#c0392b')], data: [hcol('succeeded'), hcol('failed')] };
    definitions.latency = { xs: hx, series: [line('p50 ms', '#1f5fbf'), line('p95 ms', '#8e44ad', { dash: [6, 4] })], data: [hcol('p50_ms'), hcol('p95_ms')] };
  }
  if (stats) addStats(stats);
  draw();

  function addStats(stats) {
  const xs = stats.series.map((p) => Date.parse(p.at) / 1000);
  const col = (k) => stats.series.map((p) => p[k]);
  const pct = (n, d) => (d > 0 ? Math.round((n * 10000) / d) / 100 : null);
  const bounced = stats.series.map((p) => p.bounced_hard + p.bounced_soft);
  const reached = stats.series.map((p, i) => p.sent - bounced[i]);
  Object.assign(definitions, {
    volume: {
      xs,
      series: [line('sent', '#1f5fbf'), line('delivered', '#2e8540'), line('bounced', '#c0392b')],
      data: [col('sent'), col('delivered'), bounced],
    },
    engagement: {
      xs,
      series: [line('opened (people)', '#1f5fbf'), line('opened (bots)', '#8aa8d8', { dash: [6, 4] }),
        line('clicked (people)', '#2e8540'), line('clicked (bots)', '#8fc39a', { dash: [6, 4] })],
      data: [col('opened_human'), col('opened_bot'), col('clicked_human'), col('clicked_bot')],
    },
    rates: {
      xs,
      series: [line('bounce %', '#c0392b'), line('complaint %', '#8e44ad'),
        line(`bounce limit ${stats.limits.bounce} %`, '#c0392b', { width: 1, dash: [4, 4] }),
        line(`complaint limit ${stats.limits.complaint} %`, '#8e44ad', { width: 1, dash: [4, 4] })],
      data: [stats.series.map((p, i) => pct(bounced[i], p.sent)), stats.series.map((p, i) => pct(p.complained, reached[i])),
        xs.map(() => stats.limits.bounce), xs.map(() => stats.limits.complaint)],
    },
  });
  }

  function draw() {
  const charts = {};
  for (const el of document.querySelectorAll('[data-chart]')) {
    const def = definitions[el.dataset.chart];
    if (!def) continue;
    const opts = {
      width: Math.max(280, el.clientWidth || 600),
      height: 220,
      scales: { x: { time: true } },
      series: [{ label: 'time' }, ...def.series],
      axes: [{}, { size: 50 }],
    };
    charts[el.dataset.chart] = new window.uPlot(opts, [def.xs, ...def.data], el);
  }
  window.ploverCharts = charts;
  let pending = 0;
  window.addEventListener('resize', () => {
    clearTimeout(pending);
    pending = setTimeout(() => {
      for (const [name, u] of Object.entries(charts)) {
        const el = document.querySelector(`[data-chart="${name}"]`);
        u.setSize({ width: Math.max(280, el.clientWidth || 600), height: 220 });
      }
    }, 150);
  });
  }
})();
