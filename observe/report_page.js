// The report page's script (observe/report.cpp embeds it after uPlot and the run's data). It
// draws only: every number was prepared by `diloco report` (observe/report.cpp, report_data).
// Each view is a <section class="view" id=...>; once drawn it carries data-check, a JSON
// summary of what it drew (series and their points, the axes' ranges, the data's ranges, the
// alert markers), which the test reads from the rendered page.
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('report-data').textContent);
  const palette = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
                   '#7f7f7f', '#bcbd22', '#17becf'];
  const systems = D.systems;
  // The first system of each run (the one the run was about; the others are its baselines).
  const mains = systems.filter((s, i) => i === 0 || systems[i - 1].run !== s.run);
  const several = D.runs.length > 1;

  // ---- numbers people read: 1.28M, 52.3 kB, 0.25, 4.2e-4 ----
  function si(v, unit) {
    unit = unit || '';
    if (v == null || !isFinite(v)) return '';
    const a = Math.abs(v);
    if (a === 0) return '0' + (unit ? ' ' + unit : '');
    if (a < 1e-2 && !unit) return v.toExponential(1).replace('e-', 'e-');
    const suffix = ['', 'k', 'M', 'G', 'T', 'P'];
    let k = 0, x = v;
    while (Math.abs(x) >= 999.5 && k < 5) { x /= 1000; k++; }
    const ax = Math.abs(x);
    const s = ax >= 100 ? x.toFixed(0) : ax >= 10 ? x.toFixed(1) : x.toFixed(2);
    const trimmed = s.indexOf('.') >= 0 ? s.replace(/\.?0+$/, '') : s;
    return trimmed + (unit || k ? ' ' : '') + suffix[k] + unit;
  }
  // Simulated or wall seconds: "950 s", "12,400 s", "5.2 h", "12.5 d".
  function seconds(v) {
    if (v == null || !isFinite(v)) return '';
    const a = Math.abs(v);
    if (a >= 2 * 86400) return (v / 86400).toFixed(a >= 20 * 86400 ? 0 : 1) + ' d';
    if (a >= 2 * 3600) return (v / 3600).toFixed(a >= 20 * 3600 ? 0 : 1) + ' h';
    if (a >= 100) return Math.round(v).toLocaleString('en-US') + ' s';
    if (a >= 1 || a === 0) return (+v.toFixed(2)).toString() + ' s';
    return (+(v * 1000).toFixed(1)).toString() + ' ms';
  }
  // Decimals that show a tick step exactly: 0.25 -> 2, 2.5 -> 1, 50 -> 0 (at most 6).
  function decimalsOf(step) {
    for (let d = 0; d < 6; d++) {
      const x = Math.abs(step) * Math.pow(10, d);
      if (Math.abs(x - Math.round(x)) <= 1e-6 * Math.max(1, x)) return d;
    }
    return 6;
  }
  // One time unit for a whole axis, from its largest tick: s (with thousands separators), ms,
  // h or d; decimals from the step in that unit.
  // A larger unit only where the step is a round number of it (900 s is 0.25 h; 600 s stays in
  // seconds), so a tick never rounds.
  const timeIncrs = [1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10,
    15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400,
    5 * 86400, 10 * 86400, 20 * 86400, 50 * 86400, 100 * 86400, 200 * 86400, 500 * 86400];
  function timeTicks(splits, incr) {
    const top = Math.max(0, ...splits.filter(v => v != null).map(Math.abs));
    const units = [[86400, 'd', 2 * 86400], [3600, 'h', 2 * 3600], [1, 's', 1], [1e-3, 'ms', 0]];
    const [div, unit] = units.find(([dv, , from]) => top >= from && decimalsOf(incr / dv) <= 2) || [1, 's'];
    const d = decimalsOf(incr / div);
    return splits.map(v => v == null ? '' : (v / div).toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }) + ' ' + unit);
  }
  // Tick labels: one SI multiplier for the whole axis (k, M, G from 1000 up) and as many
  // decimals as the ticks' spacing needs, so that every tick reads as the value it marks.
  function ticks(unit, scale) {
    return (u, splits, ai, space, incr) => {
      if (unit === 's') return timeTicks(splits, incr);
      scale = scale || 1;
      const vals = splits.map(v => v == null ? null : v * scale), step = incr * scale;
      const top = Math.max(0, ...vals.filter(v => v != null).map(Math.abs));
      const suffix = unit === '%' ? '%' : unit ? ' ' + unit : '';
      if (top > 0 && top < 1e-2 && unit !== '%')
        return vals.map(x => x == null ? '' : x === 0 ? '0' : x.toExponential(Math.min(3, decimalsOf(step / Math.pow(10, Math.floor(Math.log10(top))))))) ;
      const k = unit === '%' ? 0 : Math.min(5, Math.max(0, Math.floor(Math.log10(Math.max(top, 1)) / 3 + 1e-9)));
      const div = Math.pow(1000, k), d = decimalsOf(step / div);
      const pre = ['', ' k', ' M', ' G', ' T', ' P'][k];
      return vals.map(x => x == null ? '' : x === 0 && k ? '0' : (x / div).toFixed(d) + (k ? pre + (unit && unit !== '%' ? unit : '') : suffix));
    };
  }
  const fmt = {
    tokens: v => si(v),
    seconds: seconds,
    bytes: v => si(v, 'B'),
    rate: v => si(v, 'B/s'),
    plain: v => si(v),
    percent: v => (v == null || !isFinite(v)) ? '' : (100 * v).toFixed(Math.abs(v) < 0.1 ? 1 : 0) + '%',
    loss: v => (v == null || !isFinite(v)) ? '' : Math.abs(v) >= 100 ? si(v) : v.toFixed(Math.abs(v) < 1 ? 4 : 3),
  };

  // Time of the run -> its tokens, from the monitor's samples (for alert markers on a token axis).
  function tokensAt(sys, t) {
    const ts = sys.samples.t, ks = sys.samples.tokens;
    if (!ts || !ts.length) return null;
    if (t <= ts[0]) return ks[0] * (ts[0] > 0 ? t / ts[0] : 1);
    for (let i = 1; i < ts.length; i++) {
      if (t <= ts[i]) return ks[i - 1] + (ks[i] - ks[i - 1]) * (t - ts[i - 1]) / (ts[i] - ts[i - 1]);
    }
    return ks[ks.length - 1];
  }

  function alertsOf(list, xKind) {
    const out = [];
    for (const s of list) {
      for (const a of s.alerts) {
        const x = xKind === 'tokens' ? tokensAt(s, a.t) : a.t;
        if (x != null) out.push({ x: x, severity: a.severity, text: s.label + ': ' + a.kind });
      }
    }
    return out;
  }

  // ---- uPlot plugins ----
  // Alert markers: a tick at the top of the plot and a faint line down, red for critical.
  function alertPlugin(alerts) {
    return {
      hooks: {
        draw: [u => {
          if (!alerts.length) return;
          const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, pr = uPlot.pxRatio;
          ctx.save();
          for (const a of alerts) {
            if (a.x < u.scales.x.min || a.x > u.scales.x.max) continue;
            const x = Math.round(u.valToPos(a.x, 'x', true));
            const c = a.severity === 'critical' ? '#d00000' : '#f08c00';
            ctx.strokeStyle = c; ctx.globalAlpha = 0.25; ctx.lineWidth = 1 * pr;
            ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
            ctx.globalAlpha = 1; ctx.lineWidth = 3 * pr;
            ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + 9 * pr); ctx.stroke();
          }
          ctx.restore();
        }],
      },
    };
  }

  function finiteRange(arrays) {
    let lo = Infinity, hi = -Infinity;
    for (const a of arrays) for (const v of a) if (v != null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    return lo <= hi ? [lo, hi] : null;
  }

  // ---- one chart: tables of (x, y) joined on x ----
  // spec: {series: [{label, x, y, color, dash, points, width}], xlabel, ylabel, xfmt, yfmt,
  //        yrange: 'ratio' | 'nonneg' | 'auto', log, stepped (fill: false: without the area), alerts}
  function lineChart(el, spec) {
    const series = spec.series.filter(s => s.x.length > 0);
    if (!series.length) return null;
    const tables = series.map(s => [s.x, s.y]);
    const data = uPlot.join(tables);
    const width = Math.max(360, el.clientWidth - 4);
    const yr = spec.yrange || 'auto';
    let yScale = { auto: true };
    if (spec.log) {
      yScale = { distr: 3, log: 10 };
    } else if (yr === 'ratio') {
      yScale = { auto: false, range: [0, 1] };
    } else if (yr === 'nonneg') {
      yScale = { range: (u, min, max) => [0, max > 0 ? max * 1.06 : 1] };
    }
    // One x value (a run evaluated only at its end): from 0 to it, not an axis twice the run
    // centred on the point.
    const xr = finiteRange([data[0]]);
    const xScale = xr && xr[0] === xr[1] ? { time: false, auto: false, range: [Math.min(0, xr[0]), xr[1] > 0 ? xr[1] * 1.03 : 1] } : { time: false };
    const opts = {
      width: width,
      height: spec.height || 300,
      scales: { x: xScale, y: yScale },
      axes: [
        Object.assign({ label: spec.xlabel, values: ticks(spec.xunit || '', 1), size: 42 }, spec.xunit === 's' ? { incrs: timeIncrs } : {}),
        { label: spec.ylabel, values: ticks(spec.yunit || '', spec.yunit === '%' ? 100 : 1), size: 64 },
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      series: [{ label: spec.xlabel, value: (u, v) => (spec.xfmt || fmt.plain)(v) }].concat(series.map((s, i) => {
        const c = s.color || palette[i % palette.length];
        const o = {
          // A null in a series is a gap (a learner down): drawn as one, not bridged.
          label: s.label, stroke: c, width: s.width || 1.5, spanGaps: !s.gaps,
          value: (u, v) => (spec.yfmt || fmt.plain)(v),
        };
        if (s.dash) o.dash = s.dash;
        if (s.points) {
          o.paths = () => null;
          o.points = { show: true, size: 8, fill: c, stroke: c };
        } else if (spec.stepped) {
          o.paths = uPlot.paths.stepped({ align: 1 });
          if (spec.fill !== false) o.fill = c + '22';
          o.points = { show: false };
        } else {
          // A series of one point (data parallel's only evaluation, at the end) is a dot.
          o.points = s.x.length === 1 ? { show: true, size: 8, fill: c, stroke: c } : { show: false };
        }
        return o;
      })),
      plugins: [alertPlugin(spec.alerts || [])],
    };
    // What was drawn, for the test (after every draw: the scales are set by then): per series
    // its finite points; the axes and the data.
    const ys = data.slice(1);
    opts.plugins.push({ hooks: { draw: [u => {
      el.dataset.check = JSON.stringify({
        series: series.map((s, i) => ({ name: s.label, points: ys[i].filter(v => v != null && isFinite(v)).length })),
        x: [u.scales.x.min, u.scales.x.max],
        y: [u.scales.y.min, u.scales.y.max],
        dataX: finiteRange([data[0]]),
        dataY: finiteRange(ys),
        yrange: spec.log ? 'log' : yr,
        alerts: (spec.alerts || []).length,
        // The tick labels drawn and the values they mark (the test reads them back).
        ticks: u.axes.map(a => ({ splits: a._splits || [], labels: (a._values || []).map(String) })),
        // Per series, the gaps it was given (a null between points: a learner down).
        gaps: series.map(s => s.gaps ? s.y.filter((v, k) => v == null && k > 0 && k < s.y.length - 1).length : 0),
        smoothed: !!spec.smoothed,
      });
    }] } });
    return new uPlot(opts, data, el);
  }

  // ---- the timeline: one row per learner, coloured spans drawn on uPlot's canvas ----
  const stateColor = ['#2ca02c', '#f2c12e', '#d62728'];
  const stateName = ['computing', 'idle', 'down'];
  function timelineChart(el, rows, tEnd, alerts) {
    if (!rows.length) return null;
    const n = rows.length;
    const width = Math.max(360, el.clientWidth - 4);
    const opts = {
      width: width,
      height: Math.max(140, 40 + 18 * n + 40),
      scales: { x: { time: false, auto: false, range: [0, tEnd] }, y: { auto: false, range: [-0.5, n - 0.5] } },
      axes: [
        { label: 'time', values: ticks('s'), size: 42, incrs: timeIncrs },
        { values: (u, vals) => vals.map(v => (Number.isInteger(v) && v >= 0 && v < n) ? rows[n - 1 - v].label : ''),
          splits: () => rows.map((r, i) => i), size: 16 + 7 * Math.max(...rows.map(r => r.label.length)), grid: { show: false } },
      ],
      legend: { show: false },
      cursor: { drag: { x: true, y: false }, points: { show: false } },
      series: [{}, { stroke: 'transparent', paths: () => null, points: { show: false } }],
      plugins: [alertPlugin(alerts), {
        hooks: {
          draw: [u => {
            const ctx = u.ctx, pr = uPlot.pxRatio;
            ctx.save();
            ctx.beginPath(); ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height); ctx.clip();
            const hh = Math.min(14 * pr, u.bbox.height / n * 0.7);
            rows.forEach((r, i) => {
              const yc = u.valToPos(n - 1 - i, 'y', true);
              for (const s of r.segments) {
                if (s[1] < u.scales.x.min || s[0] > u.scales.x.max) continue;
                const x0 = u.valToPos(s[0], 'x', true), x1 = u.valToPos(s[1], 'x', true);
                ctx.fillStyle = stateColor[s[2]];
                ctx.fillRect(x0, yc - hh / 2, Math.max(1, x1 - x0), hh);
              }
            });
            ctx.restore();
          }],
        },
      }],
    };
    opts.plugins.push({ hooks: { draw: [u => {
      el.dataset.check = JSON.stringify({
        series: rows.map(r => ({ name: r.label, points: r.segments.length })),
        x: [u.scales.x.min, u.scales.x.max], y: [u.scales.y.min, u.scales.y.max],
        dataX: finiteRange(rows.map(r => [].concat(...r.segments.map(s => [s[0], s[1]])))),
        dataY: [0, n - 1], yrange: 'rows', alerts: alerts.length,
      });
    }] } });
    const u = new uPlot(opts, [[0, tEnd], [null, null]], el);
    const key = document.createElement('div');
    key.className = 'controls';
    key.innerHTML = stateName.map((s, i) => '<span style="display:inline-block;width:10px;height:10px;background:' +
      stateColor[i] + ';margin:0 4px 0 10px"></span>' + s).join('');
    el.appendChild(key);
    return u;
  }

  // ---- the views ----
  const lossFmt = { yfmt: fmt.loss, ylabel: 'loss (nats/token)' };
  const entropyLine = (xs) => {
    const h = systems.find(s => s.eval_floor > 0 || s.entropy_rate > 0);
    if (!h || !xs) return [];
    const floor = h.eval_floor > 0 ? h.eval_floor : h.entropy_rate;
    const label = h.eval_floor > 0 ? 'eval floor' : 'entropy rate';
    return [{ label, x: xs, y: xs.map(() => floor), color: '#555', dash: [4, 4], width: 1 }];
  };
  const xAxis = { tokens: { key: 'tokens', label: 'tokens', fmt: fmt.tokens }, time: { key: 't', label: 'time', fmt: fmt.seconds, unit: 's' } };
  // A shard's member: a learner, or past the learner slots a regional syncer.
  const memberName = (sys, id) => {
    const n = sys.start && sys.start.learners ? sys.start.learners : Infinity;
    const regional = sys.start && sys.start.topology ? sys.start.topology.regions.filter(r => r.syncer) : [];
    return Number(id) >= n && Number(id) - n < regional.length ? 'regional syncer ' + regional[Number(id) - n].name : 'learner ' + id;
  };
  const perLearner = (sys, f) => sys.learners.map(l => f(l, (mains.length > 1 ? sys.label + ' ' : '') + 'learner ' + l.id));

  const views = [
    {
      id: 'topology', title: 'Topology', about: 'Who syncs with whom: the syncer shards, each region\'s wide-area link to them, and in a region with a regional syncer its learners on the region\'s own network to it, which alone crosses the wide-area link (one merged delta per round). Learners without a region use the default link.',
      when: () => mains.some(s => s.start && s.start.topology),
      custom: (holder) => {
        const s = mains.find(x => x.start && x.start.topology);
        const topo = s.start.topology;
        const ns = 'http://www.w3.org/2000/svg';
        const W = Math.max(600, holder.clientWidth - 4);
        const groups = topo.regions.map(r => ({ name: r.name, syncer: r.syncer, learners: r.learners, wan: fmt.plain(r.wan_gbps) + ' Gbit/s, ' + fmt.plain(r.wan_ms) + ' ms', local: fmt.plain(r.local_gbps) + ' Gbit/s, ' + fmt.plain(r.local_ms) + ' ms' }));
        if (topo.direct.length) groups.push({ name: 'no region', syncer: false, learners: topo.direct, wan: fmt.plain(topo.link_gbps) + ' Gbit/s, ' + fmt.plain(topo.link_ms) + ' ms' });
        const H = 330, yShard = 30, ySync = 150, yLearner = 270;
        const svg = document.createElementNS(ns, 'svg');
        svg.setAttribute('width', W); svg.setAttribute('height', H);
        svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
        const el = (tag, attrs, text) => {
          const e = document.createElementNS(ns, tag);
          for (const k in attrs) e.setAttribute(k, attrs[k]);
          if (text !== undefined) e.textContent = text;
          svg.appendChild(e);
          return e;
        };
        // A label over the lines: lines of text on a white halo.
        const label = (x, y, lines, color) => lines.forEach((t, k) => el('text', { x, y: y + k * 12, 'text-anchor': 'middle', 'font-size': 10, fill: color, stroke: 'white', 'stroke-width': 3, 'paint-order': 'stroke' }, t));
        const box = (cx, cy, w, h, fill, label) => {
          el('rect', { x: cx - w / 2, y: cy - h / 2, width: w, height: h, rx: 6, fill, stroke: '#333' });
          el('text', { x: cx, y: cy + 4, 'text-anchor': 'middle', 'font-size': 12, fill: '#111' }, label);
        };
        // The shards along the top.
        const shards = Number(topo.shards) || 1;
        const sw = Math.min(140, (W - 40) / shards - 10);
        const shardX = [];
        for (let k = 0; k < shards; ++k) shardX.push(W / 2 + (k - (shards - 1) / 2) * (sw + 10));
        const span = W - 40, colW = span / Math.max(1, groups.length);
        groups.forEach((g, i) => {
          const cx = 20 + colW * (i + 0.5);
          const up = g.syncer ? ySync : yLearner;
          const tops = g.syncer ? [cx] : g.learners.map((_, j) => cx + (j - (g.learners.length - 1) / 2) * Math.min(34, colW / Math.max(1, g.learners.length)));
          // Wide-area links: to every shard (drawn to the shards' row).
          for (const x of tops) for (const sx of shardX) el('line', { x1: x, y1: up - 14, x2: sx, y2: yShard + 14, stroke: '#c0392b', 'stroke-width': g.syncer ? 2.5 : 1, 'stroke-opacity': 0.55 });
          const wanAt = g.syncer ? { x: cx, y: ySync - 40 } : { x: cx, y: yLearner - 44 };
          const lx = g.learners.map((_, j) => cx + (j - (g.learners.length - 1) / 2) * Math.min(34, colW / Math.max(1, g.learners.length)));
          if (g.syncer) {
            for (const x of lx) el('line', { x1: x, y1: yLearner - 12, x2: cx, y2: ySync + 14, stroke: '#2e86c1', 'stroke-width': 1.5 });
            label(cx, (ySync + yLearner) / 2, ['local', g.local], '#2e86c1');
            box(cx, ySync, Math.min(170, colW - 10), 28, '#d6eaf8', (colW < 150 ? '' : 'regional ') + 'syncer ' + g.name);
          }
          label(wanAt.x, wanAt.y, ['wide-area', g.wan], '#c0392b');
          g.learners.forEach((l, j) => {
            el('circle', { cx: lx[j], cy: yLearner, r: 12, fill: '#fdebd0', stroke: '#333' });
            el('text', { x: lx[j], y: yLearner + 4, 'text-anchor': 'middle', 'font-size': 10 }, String(l));
          });
          el('text', { x: cx, y: yLearner + 34, 'text-anchor': 'middle', 'font-size': 12, 'font-weight': 'bold' }, g.name + ' (' + g.learners.length + ' learner' + (g.learners.length === 1 ? '' : 's') + ')');
        });
        shardX.forEach((x, k) => box(x, yShard, sw, 28, '#e8f8f5', 'shard ' + k));
        holder.appendChild(svg);
        holder.dataset.check = JSON.stringify({ shards, regions: groups.length, syncers: groups.filter(g => g.syncer).length, learners: groups.reduce((n, g) => n + g.learners.length, 0) });
        return { destroy: () => { svg.remove(); }, setSize: () => {}, root: { parentNode: holder }, height: H };
      },
    },
    {
      id: 'loss', title: 'Train loss', about: 'Mean batch loss of all learners, per system, with the global model\'s evaluations (dots) and the floor: the true model\'s loss on the evaluation set (the data\'s entropy rate for runs recorded before it was kept).',
      controls: { x: ['tokens', 'time'], log: true, smooth: true },
      spec: (st) => {
        const ax = xAxis[st.x];
        const ser = [];
        systems.forEach((s, i) => {
          ser.push({ label: s.label + ' train', x: s.loss[ax.key], y: s.loss.loss, color: palette[i % 10] });
          ser.push({ label: s.label + ' eval', x: s.eval[ax.key], y: s.eval.loss, color: palette[i % 10], points: true });
        });
        const allX = finiteRange(ser.map(s => s.x));
        return Object.assign({ series: ser.concat(entropyLine(allX)), xlabel: ax.label, xfmt: ax.fmt, xunit: ax.unit, log: st.log, alerts: alertsOf(systems, st.x) }, lossFmt);
      },
    },
    {
      id: 'learner-loss', title: 'Train loss per learner', about: 'Each learner\'s mean batch loss over time: a learner that drifts, stalls or restarts shows here; a gap is a learner down.',
      controls: { log: true, smooth: true },
      spec: (st) => {
        const ser = [];
        for (const s of mains) ser.push(...perLearner(s, (l, name) => ({ label: name, x: l.t, y: l.loss, gaps: true })));
        return Object.assign({ series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', log: st.log, alerts: alertsOf(mains, 'time') }, lossFmt);
      },
    },
    {
      id: 'eval', title: 'Eval loss', about: 'The global model on held-out data during the run (simulate --eval-every) and at its end.',
      controls: { x: ['tokens', 'time'], log: true },
      spec: (st) => {
        const ax = xAxis[st.x];
        const ser = systems.map((s, i) => ({ label: s.label, x: s.eval[ax.key], y: s.eval.loss, color: palette[i % 10] }));
        return Object.assign({ series: ser.concat(entropyLine(finiteRange(ser.map(s => s.x)))), xlabel: ax.label, xfmt: ax.fmt, xunit: ax.unit, log: st.log, alerts: alertsOf(systems, st.x) }, lossFmt);
      },
    },
    {
      id: 'goodput', title: 'Goodput and uptime', about: 'Goodput: chip-time of completed inner steps over provisioned chip-time, so far. Uptime (dashed): share of the run in which some learner computed.',
      spec: () => {
        const ser = [];
        systems.forEach((s, i) => {
          ser.push({ label: s.label + ' goodput', x: s.samples.t, y: s.samples.goodput, color: palette[i % 10] });
          ser.push({ label: s.label + ' uptime', x: s.samples.t, y: s.samples.uptime, color: palette[i % 10], dash: [6, 4] });
        });
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'share', yfmt: fmt.percent, yunit: '%', yrange: 'ratio', alerts: alertsOf(systems, 'time') };
      },
    },
    {
      id: 'throughput', title: 'Throughput', about: 'Tokens processed per second by all learners (between the monitor\'s samples).',
      controls: { smooth: true },
      spec: () => ({
        series: systems.map((s, i) => ({ label: s.label, x: s.samples.throughput.t, y: s.samples.throughput.tokens_per_s, color: palette[i % 10] })),
        xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'tokens/s', yfmt: fmt.plain, yrange: 'nonneg', alerts: alertsOf(systems, 'time'),
      }),
    },
    {
      id: 'lr', title: 'Inner learning rate', about: 'The learners\' inner AdamW schedule (warmup, cosine decay to the floor) over their inner steps.',
      spec: () => ({
        series: systems.filter((s, i) => systems.findIndex(o => JSON.stringify(o.start.inner_lr) === JSON.stringify(s.start.inner_lr)) === i)
          .map((s, i) => ({ label: s.label, x: s.lr.step, y: s.lr.lr, color: palette[i % 10] })),
        xlabel: 'inner step', xfmt: fmt.plain, ylabel: 'learning rate', yfmt: fmt.plain, yrange: 'nonneg',
      }),
    },
    {
      id: 'staleness', title: 'Staleness of merged deltas', about: 'Versions between a merged delta\'s base and the global it was merged into: mean (solid) and most (dashed) per stretch of time.',
      controls: { smooth: true },
      spec: () => {
        const ser = [];
        systems.forEach((s, i) => {
          if (!s.merges.t.length) return;
          ser.push({ label: s.label + ' mean', x: s.merges.t, y: s.merges.gap_mean, color: palette[i % 10] });
          ser.push({ label: s.label + ' most', x: s.merges.t, y: s.merges.gap_max, color: palette[i % 10], dash: [5, 4] });
        });
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'versions behind', yfmt: fmt.plain, yrange: 'nonneg', alerts: alertsOf(systems, 'time') };
      },
    },
    {
      id: 'participants', title: 'Learners per merge', about: 'How many members\' deltas each merge took (solid), out of the members its shard counted live (dashed), per stretch of time: below the dashed line, merges went ahead on their quorum and grace window without the others.',
      controls: { smooth: true },
      spec: () => {
        const ser = [];
        systems.forEach((s, i) => {
          if (!s.merges.t.length) return;
          ser.push({ label: s.label + ' merged', x: s.merges.t, y: s.merges.contributors, color: palette[i % 10] });
          if (s.merges.live) ser.push({ label: s.label + ' live', x: s.merges.t, y: s.merges.live, color: palette[i % 10], dash: [5, 4] });
        });
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'members', yfmt: fmt.plain, yrange: 'nonneg', alerts: alertsOf(systems, 'time') };
      },
    },
    {
      id: 'delays', title: 'Arrival delay per learner', about: 'How long after its round opened each learner\'s delta arrived: a slow or far learner sits to the right.',
      spec: () => {
        const ser = [];
        for (const s of mains) {
          const e = s.delays.edges;
          if (!e || e.length < 2) continue;
          const centers = e.slice(0, -1);
          for (const l of s.delays.learners)
            ser.push({ label: (mains.length > 1 ? s.label + ' ' : '') + memberName(s, l.id) + ' (mean ' + fmt.seconds(l.mean_s) + ')', x: centers, y: l.counts });
        }
        return { series: ser, xlabel: 'delay after the round opened', xfmt: fmt.seconds, xunit: 's', ylabel: 'deltas', yfmt: fmt.plain, yrange: 'nonneg', stepped: true };
      },
    },
    {
      id: 'bytes', title: 'Bytes on the wire', about: 'Each learner\'s bytes sent and received so far.',
      spec: () => {
        const ser = [];
        for (const s of mains) ser.push(...perLearner(s, (l, name) => ({ label: name, x: l.t, y: l.sent.map((v, k) => v == null ? null : v + l.received[k]), gaps: true })));
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'bytes', yfmt: fmt.bytes, yunit: 'B', yrange: 'nonneg', alerts: alertsOf(mains, 'time') };
      },
    },
    {
      id: 'bandwidth', title: 'Bandwidth per learner', about: 'Bytes sent and received per second, per learner (data parallel\'s all-reduce next to DiLoCo\'s outer steps).',
      controls: { smooth: true },
      spec: () => {
        const ser = [];
        for (const s of mains) ser.push(...perLearner(s, (l, name) => ({ label: name, x: l.bandwidth.t, y: l.bandwidth.bytes_per_s })));
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'bytes/s', yfmt: fmt.rate, yunit: 'B/s', yrange: 'nonneg', alerts: alertsOf(mains, 'time') };
      },
    },
    {
      id: 'period', title: 'Inner steps H and overlap tau (adaptive)', about: 'The H (solid) and tau (dashed) each learner follows: the fragment scheduler chooses them from the learners\' measured step times and links (period_steps: auto), rising when a link slows down and falling when it recovers.',
      when: () => mains.some(s => s.learners.some(l => l.period && l.period.t.length)),
      spec: () => {
        const ser = [];
        for (const s of mains) {
          const n0 = ser.length;
          ser.push(...perLearner(s, (l, name) => l.period ? ({ label: name + ' H', x: l.period.t, y: l.period.H }) : null).filter(x => x));
          ser.push(...perLearner(s, (l, name) => l.period && l.period.tau ? ({ label: name + ' tau', x: l.period.t, y: l.period.tau, dash: [5, 4] }) : null).filter(x => x));
          ser.slice(n0).forEach((x, i, all) => { x.color = palette[i % (all.length / 2 || 1) % 10]; });
        }
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'inner steps', yfmt: fmt.plain, yrange: 'nonneg', stepped: true, fill: false, alerts: alertsOf(mains, 'time') };
      },
    },
    {
      id: 'compression', title: 'Compression of merged deltas', about: 'fp32 size over encoded size of the deltas merged in each stretch of time; dashed: what the codec should give.',
      spec: () => {
        const ser = [];
        systems.forEach((s, i) => {
          if (!s.merges.t.length) return;
          ser.push({ label: s.label, x: s.merges.t, y: s.merges.compression, color: palette[i % 10] });
          if (s.expected_compression > 0)
            ser.push({ label: s.label + ' expected', x: [s.merges.t[0], s.merges.t[s.merges.t.length - 1]], y: [s.expected_compression, s.expected_compression], color: palette[i % 10], dash: [3, 3], width: 1 });
        });
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'fp32 / encoded', yfmt: v => (v == null || !isFinite(v)) ? '' : si(v) + 'x', yrange: 'nonneg', alerts: alertsOf(systems, 'time') };
      },
    },
    {
      id: 'cosine', title: 'Agreement per tensor', about: 'Mean cosine similarity between the learners\' outer gradients of a tensor in a merge, per stretch of time (1: they push the same way, 0: unrelated, below 0: against each other): the mean over every tensor (thick) and the eight tensors the learners agree on least.',
      when: () => mains.some(s => s.merges.cosine && Object.keys(s.merges.cosine).length),
      controls: { smooth: true },
      spec: () => {
        const ser = [];
        for (const s of mains) {
          const c = s.merges.cosine || {};
          const names = Object.keys(c);
          if (!names.length) continue;
          const pre = mains.length > 1 ? s.label + ' ' : '';
          const mean = s.merges.t.map((_, k) => {
            let sum = 0, n = 0;
            for (const t of names) if (c[t][k] != null) { sum += c[t][k]; n++; }
            return n ? sum / n : null;
          });
          ser.push({ label: pre + 'mean of ' + names.length + ' tensors', x: s.merges.t, y: mean, width: 3, color: '#222' });
          const avg = t => {
            const v = c[t].filter(x => x != null);
            return v.length ? v.reduce((a, b) => a + b, 0) / v.length : Infinity;
          };
          names.sort((a, b) => avg(a) - avg(b));
          names.slice(0, 8).forEach((t, k) => ser.push({ label: pre + t, x: s.merges.t, y: c[t], color: palette[k % 10] }));
        }
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'cosine', yfmt: v => (v == null || !isFinite(v)) ? '' : v.toFixed(3), alerts: alertsOf(mains, 'time') };
      },
    },
    {
      id: 'timeline', title: 'Learners over time', about: 'Green computing, yellow waiting, red down (no reports: a failure, a restart).',
      custom: (el) => {
        const rows = [];
        let tEnd = 0;
        for (const s of systems) {
          tEnd = Math.max(tEnd, s.t_end);
          for (const l of s.timeline) rows.push({ label: s.label + ' ' + l.id, segments: l.segments });
        }
        return timelineChart(el, rows, tEnd, alertsOf(systems, 'time'));
      },
    },
    {
      id: 'shares', title: 'Token share per learner', about: 'Each learner\'s share of the tokens merged in each stretch of time: a slow learner\'s share shrinks.',
      controls: { smooth: true },
      spec: () => {
        const ser = [];
        for (const s of mains) {
          for (const id of Object.keys(s.merges.share))
            ser.push({ label: (mains.length > 1 ? s.label + ' ' : '') + memberName(s, id), x: s.merges.t, y: s.merges.share[id] });
        }
        return { series: ser, xlabel: 'time', xfmt: fmt.seconds, xunit: 's', ylabel: 'share of merged tokens', yfmt: fmt.percent, yunit: '%', yrange: 'ratio', alerts: alertsOf(mains, 'time') };
      },
    },
  ];

  // ---- smoothing and CSV ----
  // Exponential smoothing along a series: a point's weight halves every `half` points; a gap
  // (null) starts it afresh.
  function smooth(y, half) {
    const a = 1 - Math.pow(0.5, 1 / half);
    let m = null;
    return y.map(v => {
      if (v == null || !isFinite(v)) { m = null; return v; }
      m = m == null ? v : m + a * (v - m);
      return m;
    });
  }
  function smoothed(spec) {
    return Object.assign({}, spec, {
      smoothed: true,
      series: spec.series.map(s => s.points || s.x.length < 3 ? s : Object.assign({}, s, { y: smooth(s.y, 4), label: s.label + ' (smoothed)' })),
    });
  }
  // A chart's series as CSV: one column per series on the union of their x values (empty
  // where a series has no point), numbers as they are in the data.
  function csvCell(v) {
    const t = String(v);
    return /[",\n]/.test(t) ? '"' + t.replace(/"/g, '""') + '"' : t;
  }
  function csvOf(spec) {
    const series = spec.series.filter(s => s.x.length > 0);
    if (!series.length) return null;
    const data = uPlot.join(series.map(s => [s.x, s.y]));
    const lines = [[spec.xlabel || 'x'].concat(series.map(s => s.label)).map(csvCell).join(',')];
    for (let i = 0; i < data[0].length; i++)
      lines.push(data.map(col => col[i] == null || !isFinite(col[i]) ? '' : String(col[i])).join(','));
    return { text: lines.join('\n') + '\n', columns: series.length + 1, rows: data[0].length };
  }
  function download(name, text) {
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([text], { type: 'text/csv' }));
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 0);
  }

  // ---- page ----
  const nav = document.getElementById('views');
  const main = document.getElementById('charts');
  const drawn = [];
  for (const v of views.filter(v => !v.when || v.when())) {
    const a = document.createElement('a');
    a.href = '#' + v.id; a.textContent = v.title;
    nav.appendChild(a);
    const sec = document.createElement('section');
    sec.className = 'view'; sec.id = v.id;
    sec.innerHTML = '<h2></h2><p class="about"></p><div class="controls"></div><div class="chart"></div>';
    sec.querySelector('h2').textContent = v.title;
    sec.querySelector('.about').textContent = v.about;
    main.appendChild(sec);
    const holder = sec.querySelector('.chart');
    const state = { x: v.controls && v.controls.x ? v.controls.x[0] : null, log: false, smooth: false };
    let u = null, csv = null;
    const draw = () => {
      if (u) { u.destroy(); u = null; }
      holder.innerHTML = '';
      delete holder.dataset.check;
      let spec = v.custom ? null : v.spec(state);
      if (spec && state.smooth) spec = smoothed(spec);
      u = v.custom ? v.custom(holder) : lineChart(holder, spec);
      csv = v.csv ? v.csv() : spec ? csvOf(spec) : null;
      if (!u) {
        holder.innerHTML = '<div class="empty">nothing to show for this run</div>';
        holder.dataset.check = JSON.stringify({ series: [], empty: true });
      }
      sec.dataset.csv = csv ? JSON.stringify({ columns: csv.columns, rows: csv.rows, header: csv.text.slice(0, csv.text.indexOf('\n')) }) : '';
      drawn[views.indexOf(v)] = u;
    };
    const ctl = sec.querySelector('.controls');
    const button = (text, on, click) => {
      const b = document.createElement('button');
      b.textContent = text; b.className = on() ? 'on' : '';
      b.addEventListener('click', () => { click(); draw(); for (const c of ctl.querySelectorAll('button')) c.refresh(); });
      b.refresh = () => { b.className = on() ? 'on' : ''; };
      ctl.appendChild(b);
    };
    if (v.controls && v.controls.x) for (const x of v.controls.x) button(x, () => state.x === x, () => { state.x = x; });
    if (v.controls && v.controls.log) button('log scale', () => state.log, () => { state.log = !state.log; });
    if (v.controls && v.controls.smooth) button('smooth', () => state.smooth, () => { state.smooth = !state.smooth; });
    draw();
    if (csv || v.csv) {
      const b = document.createElement('button');
      b.textContent = 'CSV'; b.title = 'download what this chart shows as CSV';
      b.addEventListener('click', () => { if (csv) download(v.id + '.csv', csv.text); });
      ctl.appendChild(b);
    }
  }
  window.addEventListener('resize', () => {
    for (const u of drawn) if (u) u.setSize({ width: Math.max(360, u.root.parentNode.clientWidth - 4), height: u.height });
  });

  // ---- alerts ----
  const all = [];
  for (const s of systems) for (const a of s.alerts) all.push(Object.assign({ system: s.label }, a));
  const box = document.getElementById('alerts');
  if (all.length) {
    all.sort((p, q) => p.t - q.t);
    const shown = all.slice(0, 200);
    box.innerHTML = '<h2>Alerts (' + all.length + (all.length > shown.length ? ', the first 200 shown' : '') + ')</h2>';
    const t = document.createElement('table');
    t.innerHTML = '<tr><th>time</th><th>system</th><th>severity</th><th>kind</th><th>what</th></tr>';
    for (const a of shown) {
      const r = t.insertRow();
      [fmt.seconds(a.t), a.system, a.severity, a.kind, a.what].forEach((c, i) => {
        const cell = r.insertCell(); cell.textContent = c;
        if (i === 2) cell.className = a.severity;
      });
    }
    box.appendChild(t);
  }
  document.body.dataset.views = String(views.length);
  // How wide the page is drawn (the test checks nothing runs off a 1300 px window).
  document.body.dataset.width = String(document.documentElement.scrollWidth);
  document.body.dataset.ready = '1';
})();
