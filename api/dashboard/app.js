// Conveyor dashboard: a small single-page app over the /v1 JSON API of the same origin.
// No framework and no build step. Everything is built with DOM calls, never from HTML text: job
// payloads, errors and names are untrusted text. The page's Content-Security-Policy allows no
// inline script or style, so handlers are attached here and looks are CSS classes.
'use strict';

(() => {
  const API = 'v1/';
  const REFRESH_MS = 3000;
  const PAGE_LIMIT = 25;
  const WAITS_EVERY_MS = 30 * 1000; // the overview reads each queue's wait percentiles this often
  const WAITS_MAX = 50; // and for this many queues at most
  const WINDOW_MS = 15 * 60 * 1000;
  const TOKEN_KEY = 'conveyor.token';

  // The job statuses come from the server's list (ui/statuses.js, made from package status),
  // so that a new status needs no edit here. A status's word is how a person reads it: "dead"
  // for "failed", its wire name.
  const STATUSES = window.CONVEYOR_STATUSES;
  const STATUS_WORD = new Map(STATUSES.all.map((s) => [s.status, s.word]));
  const BY_WORD = new Map(STATUSES.all.map((s) => [s.word, s.status]));
  const statusWord = (st) => (STATUS_WORD.get(st) || String(st || 'unknown')).replace('_', ' ');
  const capital = (w) => w.charAt(0).toUpperCase() + w.slice(1);
  // Listable states, gauged first ("failed" is the dead set), then those kept while retained.
  const STATES = STATUSES.listable.map((st) => [st, capital(statusWord(st))]);
  // GAUGE is the stats field that counts a state's jobs now: the state's word.
  const GAUGE = Object.fromEntries(STATUSES.all.filter((s) => s.gauge).map((s) => [s.status, s.word]));
  // OVERVIEW_FIELD is the number the overview shows under each state's heading: a gauge, or for
  // the finished states (no gauge) the counter of the same name. A counter shown there is left
  // out of the overview's counter columns, so that no two columns share a heading.
  const OVERVIEW_FIELD = Object.fromEntries(STATES.map(([st]) => [st, GAUGE[st] || st]));
  const MAIN_COUNTERS = [
    ['enqueued', 'Enqueued'],
    ['completed', 'Completed'],
    ['failed', 'Went dead'],
    ['retried', 'Retried'],
  ];
  const ALL_COUNTERS = MAIN_COUNTERS.concat([
    ['recovered', 'Recovered'],
    ['dead_by_recovery', 'Dead by recovery'],
    ['poison', 'Poison'],
    ['refused', 'Refused'],
    ['canceled', 'Canceled'],
    ['released', 'Released'],
  ]);
  const SERIES = [
    ['completed', 'Completed'],
    ['failed', 'Went dead'],
    ['retried', 'Retried'],
  ];
  const FINAL = new Set(STATUSES.all.filter((s) => s.final).map((s) => s.status));
  // HELP says in plain words what each gauge and counter counts: the title (tooltip) of its
  // heading and the help text under the counters. "failed" is the wire name of a dead job.
  const HELP = Object.assign(Object.fromEntries(STATUSES.all.filter((s) => s.gauge).map((s) => [s.word, 'Jobs ' + s.help + '.'])), {
    enqueued: 'Jobs published since the queue was created.',
    completed: 'Jobs that succeeded.',
    failed: 'Jobs that went dead (to the dead set), for any reason: retries used up, a SkipRetry error, a worker lost on the last attempt, an unreadable entry. Its API name is "failed".',
    retried: 'Failed attempts scheduled to run again: a retry, not a job gone dead.',
    recovered: 'Jobs taken back from a worker that stopped renewing its lease (it crashed or lost Redis) and queued again; the lost attempt counts.',
    dead_by_recovery: 'Jobs whose worker was lost on their last attempt, so recovery sent them to the dead set (also counted in Went dead).',
    poison: 'Stream entries that could not be read as a job, sent to the dead set (also counted in Went dead).',
    refused: 'Late writes refused: a worker reported on a job that had moved on (canceled, recovered, put back) and nothing changed. A steady count means workers lose their leases: is the visibility timeout shorter than the work?',
    canceled: 'Jobs canceled or deleted before they finished.',
    released: 'Jobs a worker put back unfinished as it shut down, for another worker; not an attempt.',
    latency_ms: 'Latency: how long the oldest job ready to run (queued, not yet taken by a worker) has waited, by Redis\'s clock; – when none waits.',
    wait: 'Queue wait, publish to start, of the jobs started over the last 15 minutes: the median and the 99th percentile.',
  });
  const PREVIEW_CHARS = 60; // a payload preview's length in a list
  const FOLD_CHARS = 120; // an error longer than this (or of several lines) is folded
  const WHY_CHARS = 80; // a reason's detail longer than this is cut in a list

  // The reasons a job that is not running waits (its waiting_for.kind), from the server's list
  // (package status) with what each waits for. The labels are the short words a list's badge
  // and the job page's heading show; a reason without one (newer than this script) reads as its
  // name, so a new reason shows without an edit here.
  const REASON_HELP = new Map((STATUSES.reasons || []).map((r) => [r.reason, r.help]));
  const REASON_LABEL = {
    no_worker_queue: 'No worker reads the queue',
    paused: 'Queue paused',
    no_worker_type: 'No worker handles the type',
    dependencies: 'Workflow tasks',
    concurrency_limit: 'Concurrency limit',
    rate_limit: 'Rate limit',
    group_window: 'Group window full',
    debounce: 'Debounce window',
    due: 'Due time',
    priority: 'Higher priority',
    ready: 'Ready for a worker',
  };
  // A due job's label says what set its time (waiting_for.cause).
  const DUE_LABEL = { delay: 'Delayed', retry: 'Retry backoff', snooze: 'Snoozed' };
  // The reasons that are mistakes to fix (a typo in a queue's or a type's name, workers down)
  // are drawn as errors, a pause as a warning; the others end by themselves.
  const REASON_TONE = { no_worker_queue: 'bad', no_worker_type: 'bad', paused: 'warn' };
  const reasonLabel = (w) => (w.kind === 'due' && DUE_LABEL[w.cause]) || REASON_LABEL[w.kind] ||
    capital(String(w.kind || 'unknown').replace(/_/g, ' '));
  // isRetry: a scheduled job waiting for a retry's backoff after a failed attempt (its reason's
  // cause, or the scheduled_for of a server that gives no reason).
  const isRetry = (j) => (j.waiting_for && j.waiting_for.cause === 'retry') || j.scheduled_for === 'retry';

  // ---- DOM helpers ----

  const $ = (sel, root) => (root || document).querySelector(sel);

  function put(el, kids) {
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      el.append(k instanceof Node ? k : String(k));
    }
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = v;
      else if (k === 'data') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    return el;
  }

  // h builds an HTML element: h('a', {href: '#/'}, 'text', child...).
  const h = (tag, attrs, ...kids) => put(setAttrs(document.createElement(tag), attrs), kids);
  // s builds an SVG element.
  const s = (tag, attrs, ...kids) =>
    put(setAttrs(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs), kids);

  const enc = encodeURIComponent;
  const queueHref = (q, state) => '#/queues/' + enc(q) + (state ? '/' + state : '');
  const jobHref = (q, id) => '#/jobs/' + enc(q) + '/' + enc(id);

  // ---- Formatting ----

  const pad = (n, w) => String(n).padStart(w || 2, '0');
  const num = (v) => (Number.isFinite(Number(v)) ? Number(v) : 0);
  const fmtInt = (v) => num(v).toLocaleString('en-US');
  const plural = (n, one, many) => fmtInt(n) + ' ' + (num(n) === 1 ? one : many);

  function zoneOf(d) {
    const off = -d.getTimezoneOffset();
    const a = Math.abs(off);
    return 'UTC' + (off < 0 ? '-' : '+') + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
  }

  // fmtTime shows a unix-ms time in the browser's zone, to the millisecond, with the zone.
  function fmtTime(ms) {
    const d = new Date(ms);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' +
      pad(d.getMilliseconds(), 3) + ' ' + zoneOf(d);
  }

  function fmtDur(ms) {
    ms = Math.abs(num(ms));
    if (ms < 1000) return Math.round(ms) + ' ms';
    const sec = ms / 1000;
    if (sec < 60) return (sec < 10 ? sec.toFixed(1) : Math.round(sec)) + ' s';
    const m = Math.floor(sec / 60), r = Math.floor(sec % 60);
    if (m < 60) return m + 'm ' + r + 's';
    const hr = Math.floor(m / 60);
    if (hr < 48) return hr + 'h ' + (m % 60) + 'm';
    return Math.floor(hr / 24) + 'd ' + (hr % 24) + 'h';
  }

  function fmtAgo(ms) {
    const d = Date.now() - ms;
    return d >= 0 ? fmtDur(d) + ' ago' : 'in ' + fmtDur(d);
  }

  // timeEl is a <time> with the full local time; short shows only the relative time, with the
  // full time as its title.
  function timeEl(ms, short) {
    if (!num(ms)) return h('span', { class: 'muted' }, '—');
    const iso = new Date(ms).toISOString();
    if (short) return h('time', { datetime: iso, title: fmtTime(ms) }, fmtAgo(ms));
    return h('span', { class: 'when' },
      h('time', { datetime: iso }, fmtTime(ms)), ' ', h('span', { class: 'muted' }, '(' + fmtAgo(ms) + ')'));
  }

  // countdown is the time left until ms ("in 4m 10s"), or how long ago it passed; the page's
  // clock (start) moves every countdown once a second, so a wait is seen to run down.
  function countdownText(ms) {
    const d = num(ms) - Date.now();
    return d > 0 ? 'in ' + fmtDur(d) : 'passed ' + fmtDur(d) + ' ago';
  }
  const countdown = (ms) => h('span', { class: 'countdown', data: { until: String(num(ms)) } }, countdownText(ms));

  function fmtRate(v) {
    v = num(v);
    if (v === 0) return '0';
    if (v >= 1000) return (v / 1000).toFixed(v >= 10000 ? 0 : 1) + 'k';
    if (v >= 100) return v.toFixed(0);
    if (v >= 10) return v.toFixed(1).replace(/\.0$/, '');
    return v.toFixed(2).replace(/\.?0+$/, '');
  }

  // prettyValue shows a job's payload or result: JSON pretty-printed, text as it is. A part
  // still sealed (the job JSON's encrypted field: this token may not see it) is its
  // placeholder, "<encrypted, N bytes, key K>", under a lock.
  function prettyValue(v, sealed) {
    if (v === null || v === undefined) return h('p', { class: 'muted' }, 'None');
    if (sealed) {
      return h('div', { class: 'sealed' }, h('p', { class: 'muted small' }, '\u{1F512} Encrypted at rest (the payload token shows it)'),
        h('pre', { class: 'code' }, v));
    }
    if (typeof v === 'string') {
      return h('div', {}, h('p', { class: 'muted small' }, 'Text (not JSON)'), h('pre', { class: 'code' }, v));
    }
    return h('pre', { class: 'code json' }, JSON.stringify(v, null, 2));
  }

  // A dead job's status is "failed" on the wire; a person reads "dead".
  const badge = (status) => h('span', { class: 'badge st-' + status, data: { status } }, statusWord(status));

  // ---- API client ----

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  let token = '';
  try { token = sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { /* storage disabled */ }
  let tokenPrompt = null; // a Promise while the token form is showing

  // api calls the API; body, when given, is sent as JSON.
  async function api(method, path, body) {
    for (;;) {
      const sent = token;
      const headers = { Accept: 'application/json', 'X-Conveyor-Request': '1' };
      if (sent) headers.Authorization = 'Bearer ' + sent;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      let res;
      try {
        res = await fetch(API + path, { method, headers, cache: 'no-store', credentials: 'same-origin',
          body: body === undefined ? undefined : JSON.stringify(body) });
      } catch (e) {
        throw new APIError(0, 'network', 'Cannot reach the Conveyor API (' + e.message + ').');
      }
      if (res.status === 401) {
        if (token === sent) await askToken(sent !== '');
        continue; // with the token the user gave (or another request got meanwhile)
      }
      const text = await res.text();
      let answer = null;
      try { answer = text ? JSON.parse(text) : null; } catch (_) { answer = null; }
      if (!res.ok) {
        const e = (answer && answer.error) || {};
        throw new APIError(res.status, e.code || 'http_' + res.status, e.message || ('HTTP ' + res.status + ' ' + res.statusText));
      }
      return answer;
    }
  }

  // throughput reads the chart's samples from the workers' history; a queue that does not
  // exist (404) has none.
  function throughput(queue) {
    return api('GET', 'throughput' + (queue ? '?queue=' + enc(queue) : '')).catch((e) => {
      if (e.status === 404) return { samples: [] };
      throw e;
    });
  }

  // askToken shows the token form once for every request waiting on a 401; refused says the
  // last token was wrong.
  function askToken(refused) {
    if (tokenPrompt) return tokenPrompt;
    const box = $('#token'), form = $('#token-form'), input = $('#token-input');
    $('#token-error').hidden = !refused;
    box.hidden = false;
    $('#main').hidden = true;
    input.value = '';
    input.focus();
    tokenPrompt = new Promise((resolve) => {
      const submit = (ev) => {
        ev.preventDefault();
        const v = input.value.trim();
        if (!v) return;
        form.removeEventListener('submit', submit);
        token = v;
        try { sessionStorage.setItem(TOKEN_KEY, v); } catch (_) { /* tab only */ }
        box.hidden = true;
        $('#main').hidden = false;
        $('#forget-token').hidden = false;
        tokenPrompt = null;
        resolve();
      };
      form.addEventListener('submit', submit);
    });
    return tokenPrompt;
  }

  // ---- Notices ----

  function notify(kind, ...kids) {
    const n = $('#notice');
    n.replaceChildren(h('span', {}, ...kids),
      h('button', { type: 'button', class: 'linklike', 'aria-label': 'Dismiss message', onclick: () => { n.hidden = true; } }, '×'));
    n.className = 'notice ' + kind;
    n.hidden = false;
  }

  function errorBox(what, err) {
    return h('div', { class: 'error-box', role: 'alert' },
      h('strong', {}, what + ': '), err.message || String(err));
  }

  // confirmInline replaces el's content with a question and two buttons; it resolves true when
  // the user confirms, restoring el either way.
  function confirmInline(el, question, yes) {
    const before = Array.from(el.childNodes);
    const trigger = document.activeElement;
    return new Promise((resolve) => {
      const done = (ok) => {
        el.replaceChildren(...before);
        if (trigger && trigger.isConnected) trigger.focus();
        resolve(ok);
      };
      const keep = h('button', { type: 'button', class: 'confirm-no', onclick: () => done(false) }, 'Keep');
      el.replaceChildren(h('span', { class: 'confirm', role: 'group', 'aria-label': question },
        h('span', { class: 'confirm-q' }, question + ' '),
        h('button', { type: 'button', class: 'danger confirm-yes', onclick: () => done(true) }, yes), ' ', keep));
      keep.focus();
    });
  }

  // ---- Throughput chart ----

  function niceCeil(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // chart draws throughput samples as an SVG line chart sized to width px.
  function chart(data, width, label) {
    const samples = ((data && data.samples) || []).filter((p) => num(p.t) > 0);
    const W = Math.max(260, Math.floor(width));
    const H = W < 520 ? 190 : 240;
    const m = { l: 54, r: 14, t: 12, b: 34 };
    const t1 = samples.length ? Math.max(Date.now(), num(samples[samples.length - 1].t)) : Date.now();
    const t0 = t1 - WINDOW_MS;
    let peak = 0;
    for (const p of samples) for (const [k] of SERIES) peak = Math.max(peak, num(p[k]));
    const ymax = niceCeil(peak);
    const x = (t) => m.l + ((t - t0) / (t1 - t0)) * (W - m.l - m.r);
    const y = (v) => H - m.b - (v / ymax) * (H - m.t - m.b);
    const id = 'chart-' + Math.random().toString(36).slice(2, 8);
    const peaks = SERIES.map(([k, name]) => name.toLowerCase() + ' peaked at ' +
      fmtRate(samples.reduce((a, p) => Math.max(a, num(p[k])), 0)) + ' per second').join(', ');
    const svg = s('svg', {
      class: 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img',
      'aria-labelledby': id + '-t ' + id + '-d',
    },
    s('title', { id: id + '-t' }, label),
    s('desc', { id: id + '-d' }, samples.length
      ? 'Jobs per second over the last 15 minutes, ' + samples.length + ' samples: ' + peaks + '.'
      : 'No samples yet.'));
    // Y axis: gridlines and labels.
    const g = s('g', { class: 'axis' });
    const ticks = 4;
    for (let i = 0; i <= ticks; i++) {
      const v = (ymax * i) / ticks, yy = y(v);
      g.append(s('line', { class: 'grid', x1: m.l, x2: W - m.r, y1: yy, y2: yy }));
      g.append(s('text', { x: m.l - 6, y: yy + 4, 'text-anchor': 'end' }, fmtRate(v)));
    }
    const ym = (m.t + H - m.b) / 2;
    g.append(s('text', { class: 'axis-title', x: 12, y: ym, 'text-anchor': 'middle', transform: 'rotate(-90 12 ' + ym + ')' }, 'jobs/s'));
    // X axis: a tick every 3 minutes (5 on a narrow chart) of local clock time.
    const step = (W < 520 ? 5 : 3) * 60 * 1000;
    const first = Math.ceil(t0 / step) * step;
    g.append(s('line', { class: 'base', x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
    for (let t = first; t <= t1; t += step) {
      const xx = x(t), d = new Date(t);
      g.append(s('line', { class: 'tick', x1: xx, x2: xx, y1: H - m.b, y2: H - m.b + 4 }));
      g.append(s('text', { x: xx, y: H - m.b + 16, 'text-anchor': 'middle' }, pad(d.getHours()) + ':' + pad(d.getMinutes())));
    }
    g.append(s('text', { class: 'axis-title', x: W - m.r, y: H - 3, 'text-anchor': 'end' }, 'local time (' + zoneOf(new Date()) + ')'));
    svg.append(g);
    if (samples.length === 0) {
      svg.append(s('text', { class: 'empty', x: (m.l + W - m.r) / 2, y: (m.t + H - m.b) / 2, 'text-anchor': 'middle' }, 'No samples yet'));
    }
    for (const [k] of SERIES) {
      const pts = samples.map((p) => x(num(p.t)).toFixed(1) + ',' + y(num(p[k])).toFixed(1)).join(' ');
      if (samples.length === 1) {
        svg.append(s('circle', { class: 'series s-' + k, cx: x(num(samples[0].t)), cy: y(num(samples[0][k])), r: 2.5, data: { series: k } }));
      } else if (samples.length > 1) {
        svg.append(s('polyline', { class: 'series s-' + k, points: pts, fill: 'none', data: { series: k } }));
      }
    }
    const last = samples[samples.length - 1] || {};
    const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' },
      SERIES.map(([k, name]) => h('li', { data: { series: k } },
        h('span', { class: 'swatch s-' + k, 'aria-hidden': 'true' }), name + ' ',
        h('span', { class: 'muted' }, fmtRate(last[k]) + '/s now'))));
    return [svg, legend];
  }

  // chartBox is a figure that redraws its chart on data and on resize.
  function chartBox(label) {
    const fig = h('figure', { class: 'chart-box' });
    const cap = h('figcaption', {}, label);
    let last = null;
    const draw = () => {
      if (!last) return;
      const w = fig.clientWidth || 600;
      fig.replaceChildren(cap, ...chart(last, w, label));
    };
    return { el: fig, update: (data) => { last = data; draw(); }, redraw: draw };
  }

  // fmtMs shows a latency percentile in milliseconds (the API's *_ms fields): absent without
  // attempts; 0.5 stands for anything under a millisecond.
  function fmtMs(v) {
    const n = num(v);
    if (!(n > 0)) return '–';
    if (n < 1) return '<1 ms';
    if (n < 1000) return (n < 10 ? n.toFixed(1) : Math.round(n)) + ' ms';
    if (n < 60000) return (n / 1000).toFixed(n < 10000 ? 2 : 1) + ' s';
    return (n / 60000).toFixed(1) + ' min';
  }

  // fmtLatency shows a queue's latency (latency_ms): short ones as fmtMs does, long ones in
  // minutes and hours.
  const fmtLatency = (v) => (num(v) >= 60000 ? fmtDur(v) : fmtMs(v));

  // latencyBox shows a queue's latency now (the age of its oldest ready job, from its stats) and
  // its queue wait (publish to start) and execution time percentiles over the chart's window,
  // from the same GET /v1/throughput answer (its total).
  function latencyBox(nowLabel) {
    const dl = h('dl', { class: 'counters latency', 'aria-label': 'Latency now and over the last 15 minutes' });
    const FIELDS = [['wait_p50_ms', 'Queue wait p50'], ['wait_p99_ms', 'Queue wait p99'],
      ['exec_p50_ms', 'Execution p50'], ['exec_p99_ms', 'Execution p99']];
    const update = (data, st) => {
      const t = (data && data.total) || {};
      dl.replaceChildren(
        h('div', { data: { field: 'latency_ms', ms: String(num(st && st.latency_ms)) }, title: HELP.latency_ms },
          h('dt', {}, nowLabel || 'Latency now'), h('dd', {}, fmtLatency(st && st.latency_ms))),
        ...FIELDS.map(([k, name]) => h('div', { data: { field: k } }, h('dt', {}, name), h('dd', {}, fmtMs(t[k])))));
    };
    update(null, null);
    return { el: dl, update };
  }

  // ---- Views ----
  //
  // A view renders into #main and may have refresh() (run every REFRESH_MS while it shows)
  // and resize(). gen guards against answers that arrive after the user moved on.

  let gen = 0;
  let view = null;
  const main = () => $('#main');
  const live = (g) => g === gen;

  function heading(text, ...extra) {
    return h('div', { class: 'page-head' }, h('h1', {}, text), ...extra);
  }

  function stamp() {
    const d = new Date();
    $('#updated').textContent = 'Updated ' + pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) +
      ' · times in ' + (Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time') + ' (' + zoneOf(d) + ')';
  }

  // tabs links a queue's overview and state lists, with the queue's gauges.
  function tabs(q, current, stats) {
    return h('nav', { class: 'tabs', 'aria-label': 'Queue ' + q },
      h('a', { href: queueHref(q), 'aria-current': current === '' ? 'page' : null }, 'Overview'),
      STATES.map(([st, name]) => h('a', { href: queueHref(q, st), 'aria-current': current === st ? 'page' : null, data: { state: st } },
        name, GAUGE[st] ? [' ', h('span', { class: 'count', data: { field: GAUGE[st] } }, stats ? fmtInt(stats[GAUGE[st]]) : '…')] : '')),
      h('a', { href: queueHref(q, 'workflows'), 'aria-current': current === 'workflows' ? 'page' : null, data: { state: 'workflows' } }, 'Workflows'));
  }

  function updateTabCounts(stats) {
    if (!stats) return;
    for (const el of document.querySelectorAll('.tabs .count')) el.textContent = fmtInt(stats[el.dataset.field]);
  }

  // navAt is when the navigation's counts were last read: tick reads them itself on the pages
  // that read no queue stats.
  let navAt = 0;

  // allQueues reads every queue's stats (GET /v1/queues) and updates the navigation's counts
  // with them, whichever view reads them.
  async function allQueues() {
    const body = await api('GET', 'queues');
    const qs = (body && body.queues) || [];
    updateNav(qs);
    return qs;
  }

  // updateNav shows, beside the global pages in the navigation, how many jobs they list across
  // the queues: each count's field (a gauge) summed. Retries has none: no gauge counts the
  // retries apart from the other scheduled jobs.
  function updateNav(queues) {
    navAt = Date.now();
    for (const el of document.querySelectorAll('.top nav .count[data-field]')) {
      const n = queues.reduce((a, q) => a + num(q[el.dataset.field]), 0);
      el.textContent = fmtInt(n);
      el.classList.toggle('zero', n === 0);
    }
  }

  async function queueStats(q) {
    return (await allQueues()).find((x) => x.queue === q) || null;
  }

  // Overview: every queue's gauges, latency and main counters, and the throughput of all queues.
  function overview() {
    const g = gen;
    const chartFig = chartBox('All queues: jobs per second over the last 15 minutes');
    const lat = latencyBox('Latency now, highest');
    const tableWrap = h('div', {});
    const err = h('div', {});
    main().replaceChildren(heading('Queues'), err,
      h('section', { class: 'card', 'aria-labelledby': 'tp-h' }, h('h2', { id: 'tp-h' }, 'Throughput'), chartFig.el, lat.el),
      h('section', { class: 'card', 'aria-labelledby': 'q-h' }, h('h2', { id: 'q-h' }, 'Queues'), tableWrap));
    // Each queue's queue wait percentiles come from its own GET /v1/throughput: a call a queue,
    // so they are read every WAITS_EVERY_MS rather than every refresh, and for the first
    // WAITS_MAX queues only.
    const waits = new Map();
    let waitsAt = 0;
    const readWaits = async (qs) => {
      waitsAt = Date.now();
      const got = await Promise.all(qs.slice(0, WAITS_MAX).map((q) =>
        throughput(q.queue).then((t) => [q.queue, (t && t.total) || {}], () => [q.queue, null])));
      for (const [q, t] of got) if (t) waits.set(q, t);
    };
    const refresh = async () => {
      try {
        const [qs, tp] = await Promise.all([allQueues(), throughput('')]);
        if (Date.now() - waitsAt >= WAITS_EVERY_MS) await readWaits(qs);
        if (!live(g)) return;
        err.replaceChildren();
        renderQueues(tableWrap, qs, waits);
        chartFig.update(tp);
        // The oldest ready job of any queue.
        lat.update(tp, { latency_ms: qs.reduce((a, q) => Math.max(a, num(q.latency_ms)), 0) });
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not load the queues', e));
      }
    };
    refresh();
    return { refresh, resize: chartFig.redraw };
  }

  // renderQueues draws the overview's table: each queue's gauges, its latency and queue wait
  // percentiles (waits, by queue: GET /v1/throughput's totals), then its main counters.
  function renderQueues(wrap, queues, waits) {
    if (queues.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted' }, 'No queues yet. Publish a job (conveyor publish --queue emails --type echo) and it shows here.'));
      return;
    }
    const shown = new Set(Object.values(OVERVIEW_FIELD));
    const states = STATES.map(([st, name]) => [OVERVIEW_FIELD[st], name, st]);
    const counters = MAIN_COUNTERS.filter(([k]) => !shown.has(k)).map(([k, name]) => [k, name, null]);
    const th = ([k, name, st]) => h('th', { scope: 'col', class: 'num' + (st ? ' gauge' : ''), title: HELP[k] || null }, name);
    const td = (q) => ([k, name, st]) => h('td', { class: 'num' + (st ? ' gauge' : '') + (k === 'dead' && num(q[k]) > 0 ? ' has-dead' : ''), data: { label: name, field: k } },
      st ? h('a', { href: queueHref(q.queue, st), 'aria-label': name + ' jobs of ' + q.queue + ': ' + fmtInt(q[k]) }, fmtInt(q[k]))
        : fmtInt(q[k]));
    const table = h('table', { class: 'grid-table queues' },
      h('caption', { class: 'visually-hidden' }, 'Jobs in each state, latency and counters, by queue'),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Queue'), states.map(th),
        h('th', { scope: 'col', class: 'num', title: HELP.latency_ms + ' Under it: ' + HELP.wait }, 'Latency'),
        counters.map(th))),
      h('tbody', {}, queues.map((q) => {
        const w = waits && waits.get(q.queue);
        return h('tr', { data: { queue: q.queue } },
          h('th', { scope: 'row', class: 'name' }, h('a', { href: queueHref(q.queue) }, q.queue), q.paused ? [' ', pausedBadge()] : null),
          states.map(td(q)),
          h('td', { class: 'num latency-now', data: { label: 'Latency', field: 'latency_ms', ms: String(num(q.latency_ms)) } },
            h('span', {}, fmtLatency(q.latency_ms)),
            w && (num(w.wait_p50_ms) || num(w.wait_p99_ms))
              ? h('span', { class: 'wait-pct muted', data: { field: 'wait' }, title: HELP.wait }, 'wait ' + fmtMs(w.wait_p50_ms) + ' / ' + fmtMs(w.wait_p99_ms))
              : ''),
          counters.map(td(q)));
      })));
    // A wide table (many statuses) scrolls in its card, not the page.
    wrap.replaceChildren(h('div', { class: 'table-scroll' }, table));
  }

  // Queue: one queue's gauges, every counter and its throughput.
  function queuePage(q) {
    const g = gen;
    const chartFig = chartBox(q + ': jobs per second over the last 15 minutes');
    const lat = latencyBox();
    const counters = h('dl', { class: 'counters' });
    const reasons = h('dl', { class: 'counters reasons' });
    const reasonsCard = h('section', { class: 'card', 'aria-labelledby': 'r-h', hidden: true },
      h('h2', { id: 'r-h' }, 'Why jobs are not running'), reasons);
    const err = h('div', {});
    const pause = h('div', { class: 'pause-box' });
    const bound = boundCard(q, g);
    main().replaceChildren(heading('Queue ' + q), tabs(q, '', null), err, pause, reasonsCard,
      h('section', { class: 'card', 'aria-labelledby': 'c-h' }, h('h2', { id: 'c-h' }, 'Counters'), counters, countersHelp()),
      bound.el,
      h('section', { class: 'card', 'aria-labelledby': 'tp-h' }, h('h2', { id: 'tp-h' }, 'Throughput'), chartFig.el, lat.el),
      limitsCard(q, g), groupsCard(q, g));
    const refresh = async () => {
      try {
        const [st, tp] = await Promise.all([queueStats(q), throughput(q)]);
        if (!live(g)) return;
        if (!st) {
          err.replaceChildren(h('div', { class: 'error-box', role: 'alert' }, 'There is no queue named ' + q + '.'));
          return;
        }
        err.replaceChildren();
        updateTabCounts(st);
        renderPause(pause, q, !!st.paused, refresh);
        counters.replaceChildren(...ALL_COUNTERS.map(([k, name]) =>
          h('div', { data: { field: k }, title: HELP[k] || null }, h('dt', {}, name), h('dd', {}, fmtInt(st[k])))));
        renderReasons(reasonsCard, reasons, st);
        bound.update(st);
        chartFig.update(tp);
        lat.update(tp, st);
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not load the queue', e));
      }
    };
    refresh();
    return { refresh, resize: chartFig.redraw };
  }

  // renderReasons shows how many of the queue's jobs wait for each reason (its stats'
  // waiting_for), in the order the reasons are checked; the card hides when there are none (or
  // the server counts none).
  function renderReasons(card, dl, st) {
    const counts = (st && st.waiting_for) || {};
    const order = Array.from(REASON_HELP.keys());
    const kinds = Object.keys(counts).filter((k) => num(counts[k]) > 0)
      .sort((a, b) => (order.indexOf(a) >>> 0) - (order.indexOf(b) >>> 0));
    card.hidden = kinds.length === 0;
    dl.replaceChildren(...kinds.map((k) => h('div', { class: 'why-' + (REASON_TONE[k] || 'wait'), data: { reason: k },
      title: REASON_HELP.has(k) ? 'Jobs waiting for ' + REASON_HELP.get(k) + '.' : null },
    h('dt', {}, reasonLabel({ kind: k })), h('dd', {}, fmtInt(counts[k])))));
  }

  // countersHelp explains every counter in plain words, folded under the counters.
  function countersHelp() {
    return h('details', { class: 'counters-help' }, h('summary', {}, 'What do these count?'),
      h('dl', {}, ALL_COUNTERS.map(([k, name]) => [h('dt', {}, name), h('dd', {}, HELP[k])])));
  }

  const pausedBadge = () => h('span', { class: 'badge paused', data: { paused: 'true' } }, 'paused');

  // renderPause shows whether queue q is paused and a button that pauses or resumes it
  // (POST /v1/queues/{q}/pause or /resume); then refresh runs again.
  function renderPause(box, q, paused, refresh) {
    const btn = h('button', {
      type: 'button', class: 'pause-btn' + (paused ? '' : ' danger'), data: { action: paused ? 'resume' : 'pause' },
      onclick: async () => {
        btn.disabled = true;
        try {
          await api('POST', 'queues/' + enc(q) + (paused ? '/resume' : '/pause'));
          notify('ok', (paused ? 'Resumed ' : 'Paused ') + q + (paused ? ': workers take its jobs again.' : ': workers take none of its jobs until it is resumed.'));
        } catch (e) {
          notify('bad', 'Could not ' + (paused ? 'resume ' : 'pause ') + q + ': ' + e.message);
        }
        refresh();
      },
    }, paused ? 'Resume' : 'Pause');
    box.replaceChildren(...(paused ? [pausedBadge(), ' ', btn,
      h('span', { class: 'muted' }, ' Workers take none of its jobs; they wait, and scheduled ones are promoted when due.')] : [btn]));
  }

  // ---- Limits: a queue's flow-control limits (GET, PUT, DELETE v1/queues/Q/limits) ----

  const UNITS = [['ms', 'milliseconds', 1], ['s', 'seconds', 1000], ['m', 'minutes', 60000], ['h', 'hours', 3600000]];

  // fmtInterval shows interval_ms in the largest unit that divides it: 1s, 90s, 500ms, 2h.
  function fmtInterval(ms) {
    for (const [u, , f] of UNITS.slice().reverse()) if (ms % f === 0) return (ms / f) + u;
    return ms + 'ms';
  }

  // limitsCard lists the queue's limits, each with a delete button, and a form that sets one.
  // It loads when the page opens and after each change, not on every refresh: rows do not move
  // under the pointer.
  function limitsCard(q, g) {
    const base = 'queues/' + enc(q) + '/limits';
    const list = h('div', { class: 'limits-list' }, h('p', { class: 'loading' }, 'Loading…'));
    const field = (id, label, input) => h('div', { class: 'field' }, h('label', { for: id }, label), input);
    const typ = h('input', { id: 'limit-type', name: 'type', type: 'text', maxlength: '128', spellcheck: 'false', autocomplete: 'off', placeholder: 'every type' });
    const perKey = h('input', { id: 'limit-per-key', name: 'per_key', type: 'checkbox' });
    const rate = h('input', { id: 'limit-rate', name: 'rate', type: 'number', min: '0', step: '1', inputmode: 'numeric' });
    const every = h('input', { id: 'limit-interval', name: 'interval', type: 'number', min: '1', step: '1', value: '1', inputmode: 'numeric' });
    const unit = h('select', { id: 'limit-unit', name: 'unit', 'aria-label': 'Rate interval unit' },
      UNITS.map(([u, name]) => h('option', { value: u, selected: u === 's' }, name)));
    const conc = h('input', { id: 'limit-concurrency', name: 'concurrency', type: 'number', min: '0', step: '1', inputmode: 'numeric' });
    const form = h('form', { id: 'limit-form', class: 'limit-form', 'aria-labelledby': 'lf-h' },
      h('h3', { id: 'lf-h' }, 'Set a limit'),
      h('p', { class: 'muted' }, 'A limit replaces the one of the same scope. A job is held to every limit whose scope it is in; limits apply to every worker at once.'),
      field('limit-type', 'Job type', typ),
      h('div', { class: 'field check' }, perKey, h('label', { for: 'limit-per-key' }, 'Each limit key separately')),
      h('fieldset', { class: 'field rate' }, h('legend', {}, 'Rate: most jobs started in any interval'),
        h('label', { for: 'limit-rate', class: 'visually-hidden' }, 'Jobs'), rate, ' per ',
        h('label', { for: 'limit-interval', class: 'visually-hidden' }, 'Interval'), every, ' ', unit),
      field('limit-concurrency', 'Concurrency: jobs running at once', conc),
      h('button', { type: 'submit' }, 'Set limit'));
    const load = async () => {
      try {
        const body = await api('GET', base);
        if (live(g)) renderLimits(list, q, (body && body.limits) || [], load);
      } catch (e) {
        if (live(g)) list.replaceChildren(errorBox('Could not load the limits', e));
      }
    };
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const n = Math.trunc(num(rate.value)), c = Math.trunc(num(conc.value));
      const f = (UNITS.find(([u]) => u === unit.value) || UNITS[1])[2];
      const limit = { type: typ.value.trim(), per_key: perKey.checked, rate: n, interval_ms: n > 0 ? Math.trunc(num(every.value)) * f : 0, concurrency: c };
      try {
        await api('PUT', base, limit);
        notify('ok', 'Set the limit for ' + scopeText(limit) + '.');
        await load();
      } catch (e) {
        notify('bad', 'Could not set the limit: ' + e.message);
      }
    });
    load();
    return h('section', { class: 'card limits', 'aria-labelledby': 'l-h' }, h('h2', { id: 'l-h' }, 'Limits'), list, form);
  }

  function scopeText(l) {
    return (l.type ? 'type ' + l.type : 'every job') + (l.per_key ? ', per limit key' : '');
  }

  function renderLimits(wrap, q, limits, reload) {
    if (limits.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted' }, 'No limits: jobs start as fast as workers take them.'));
      return;
    }
    const table = h('table', { class: 'grid-table limits-table' },
      h('caption', { class: 'visually-hidden' }, 'Limits of queue ' + q),
      h('thead', {}, h('tr', {}, ['Job type', 'Per key', 'Rate', 'Concurrency', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, limits.map((l) => {
        const act = h('td', { class: 'actions' });
        const tr = h('tr', { data: { type: l.type, perKey: String(l.per_key) } },
          h('td', { data: { label: 'Job type', field: 'type' } }, l.type || 'every type'),
          h('td', { data: { label: 'Per key', field: 'per_key' } }, l.per_key ? 'yes' : 'no'),
          h('td', { data: { label: 'Rate', field: 'rate' } }, l.rate > 0 ? fmtInt(l.rate) + ' / ' + fmtInterval(l.interval_ms) : '—'),
          h('td', { data: { label: 'Concurrency', field: 'concurrency' } }, l.concurrency > 0 ? fmtInt(l.concurrency) : '—'),
          act);
        act.append(h('button', { type: 'button', class: 'danger delete-limit', 'aria-label': 'Delete the limit for ' + scopeText(l), onclick: async () => {
          if (!(await confirmInline(act, 'Delete this limit?', 'Delete'))) return;
          try {
            await api('DELETE', 'queues/' + enc(q) + '/limits?type=' + enc(l.type) + '&per_key=' + l.per_key);
            notify('ok', 'Deleted the limit for ' + scopeText(l) + '.');
          } catch (e) {
            notify('bad', 'Could not delete the limit: ' + e.message);
          }
          await reload();
        } }, 'Delete'));
        return tr;
      })));
    wrap.replaceChildren(table);
  }

  // ---- Groups: a queue's fair groups (GET, PUT v1/queues/Q/groups) ----

  // groupsCard shows the queue's group window and its groups (weight, jobs in the window and
  // waiting), and a form that sets the window or a group's weight. Like the limits, it loads
  // when the page opens and after each change.
  function groupsCard(q, g) {
    const base = 'queues/' + enc(q) + '/groups';
    const list = h('div', { class: 'groups-list' }, h('p', { class: 'loading' }, 'Loading…'));
    const field = (id, label, input) => h('div', { class: 'field' }, h('label', { for: id }, label), input);
    const win = h('input', { id: 'group-window', name: 'window', type: 'number', min: '1', step: '1', inputmode: 'numeric' });
    const name = h('input', { id: 'group-name', name: 'group', type: 'text', maxlength: '128', spellcheck: 'false', autocomplete: 'off', placeholder: 'tenant-42' });
    const weight = h('input', { id: 'group-weight', name: 'weight', type: 'number', min: '0', step: '1', inputmode: 'numeric' });
    const form = h('form', { id: 'group-form', class: 'limit-form', 'aria-labelledby': 'gf-h' },
      h('h3', { id: 'gf-h' }, 'Set the window or a weight'),
      h('p', { class: 'muted' }, 'At most the window of each group\'s jobs (times its weight) are in the stream or running at once; the others wait in their group\'s order. A weight of 0 sets a group back to 1.'),
      field('group-window', 'Window: jobs of each group at once', win),
      field('group-name', 'Group', name),
      field('group-weight', 'Weight', weight),
      h('button', { type: 'submit' }, 'Set'));
    const load = async () => {
      try {
        const body = await api('GET', base);
        if (live(g)) renderGroups(list, q, body || { groups: [] });
      } catch (e) {
        if (live(g)) list.replaceChildren(errorBox('Could not load the groups', e));
      }
    };
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const change = {};
      const w = Math.trunc(num(win.value));
      if (w > 0) change.window = w;
      const gname = name.value.trim();
      if (gname !== '') change.weights = { [gname]: Math.trunc(num(weight.value)) };
      if (change.window === undefined && change.weights === undefined) {
        notify('bad', 'Give a window, or a group and its weight.');
        return;
      }
      try {
        await api('PUT', base, change);
        notify('ok', 'Set the groups of ' + q + '.');
        await load();
      } catch (e) {
        notify('bad', 'Could not set the groups: ' + e.message);
      }
    });
    load();
    return h('section', { class: 'card groups', 'aria-labelledby': 'g-h' }, h('h2', { id: 'g-h' }, 'Groups'), list, form);
  }

  function renderGroups(wrap, q, body) {
    const win = h('p', { class: 'group-window', data: { window: String(body.window) } },
      'Window: ' + fmtInt(body.window) + ' jobs of each group at once' + (body.window_set ? '' : ' (the default)') + '.');
    const groups = body.groups || [];
    if (groups.length === 0) {
      wrap.replaceChildren(win, h('p', { class: 'muted' }, 'No groups: no job of this queue has one now.'));
      return;
    }
    const table = h('table', { class: 'grid-table groups-table' },
      h('caption', { class: 'visually-hidden' }, 'Groups of queue ' + q),
      h('thead', {}, h('tr', {}, ['Group', 'Weight', 'In the window', 'Waiting'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, groups.map((gr) => h('tr', { data: { group: gr.group } },
        h('td', { data: { label: 'Group', field: 'group' } }, gr.group),
        h('td', { data: { label: 'Weight', field: 'weight' } }, fmtInt(gr.weight)),
        h('td', { data: { label: 'In the window', field: 'in_window' } }, fmtInt(gr.in_window)),
        h('td', { data: { label: 'Waiting', field: 'waiting' } }, fmtInt(gr.waiting))))));
    wrap.replaceChildren(win, table);
  }

  // ---- Bound: a queue's bound on its waiting jobs (GET, PATCH v1/queues/Q/settings) ----

  const FULL_POLICIES = [
    ['reject', 'reject: refuse the publish'],
    ['drop-oldest', 'drop-oldest: cancel the oldest ready job'],
  ];

  // boundCard shows the queue's bound on its waiting jobs (max_waiting and full_policy) and on
  // each limit key's unfinished jobs (max_waiting_per_key), the
  // jobs waiting against it (the gauges Queued plus Scheduled, as the publish script counts
  // them), the publishes refused and the jobs dropped at it, and a form that sets it. The
  // settings load when the page opens and after a change, so the form keeps what the user
  // types; the count and the counters follow every refresh (update, with the queue's stats).
  function boundCard(q, g) {
    const base = 'queues/' + enc(q) + '/settings';
    let set = null, st = null;
    const summary = h('div', { class: 'bound-summary' }, h('p', { class: 'loading' }, 'Loading…'));
    const max = h('input', { id: 'bound-max', name: 'max_waiting', type: 'number', min: '0', step: '1', inputmode: 'numeric' });
    const perKey = h('input', { id: 'bound-per-key', name: 'max_waiting_per_key', type: 'number', min: '0', step: '1', inputmode: 'numeric' });
    const policy = h('select', { id: 'bound-policy', name: 'full_policy' },
      FULL_POLICIES.map(([p, name]) => h('option', { value: p }, name)));
    const field = (id, label, input) => h('div', { class: 'field' }, h('label', { for: id }, label), input);
    const form = h('form', { id: 'bound-form', class: 'limit-form', 'aria-labelledby': 'bf-h' },
      h('h3', { id: 'bf-h' }, 'Set the bound'),
      h('p', { class: 'muted' }, 'A publish that finds the queue holding this many waiting jobs (ready, scheduled, in a group\'s line) is refused (HTTP 429, Go ErrQueueFull) or cancels the oldest ready job to get in, by the policy. 0 removes the bound. Publishers in other processes see a change within 5 seconds.'),
      field('bound-max', 'Most jobs waiting (max_waiting)', max),
      field('bound-policy', 'At the bound (full_policy)', policy),
      h('p', { class: 'muted' }, 'A publish of a job with a limit key whose unfinished jobs (waiting or running) number this many is refused (HTTP 429), whatever the policy. Jobs without a limit key are not counted. 0 removes the bound.'),
      field('bound-per-key', 'Most unfinished jobs per limit key (max_waiting_per_key)', perKey),
      h('button', { type: 'submit' }, 'Set bound'));
    const draw = () => {
      if (!set) return;
      const cap = num(set.max_waiting), waiting = st ? num(st.queued) + num(st.scheduled) : null;
      const parts = num(set.partitions) > 1 ? num(set.partitions) : 1;
      const rows = [];
      if (cap > 0) {
        rows.push(h('p', { class: 'bound-line', data: { field: 'bound', maxWaiting: String(cap), waiting: waiting === null ? '' : String(waiting) } },
          h('strong', {}, waiting === null ? '…' : fmtInt(waiting)), ' / ', fmtInt(cap), ' waiting',
          h('span', { class: 'badge bound-policy', data: { policy: set.full_policy || 'reject' } }, set.full_policy || 'reject')));
        if (waiting !== null) {
          rows.push(h('meter', { class: 'bound-meter', min: '0', max: String(cap), value: String(Math.min(waiting, cap)),
            low: String(Math.floor(cap * 0.75)), high: String(Math.floor(cap * 0.9)), optimum: '0',
            'aria-label': 'Jobs waiting against the bound' }));
        }
        if (parts > 1) {
          rows.push(h('p', { class: 'muted' }, 'Each of the ' + fmtInt(parts) + ' partitions holds at most ' +
            fmtInt(Math.ceil(cap / parts)) + ' waiting jobs, and refuses or drops on its own.'));
        }
      } else {
        rows.push(h('p', { class: 'muted bound-line', data: { field: 'bound', maxWaiting: '0' } },
          'No bound: publishes are never refused for the number of jobs waiting.'));
      }
      const kcap = num(set.max_waiting_per_key);
      if (kcap > 0) {
        rows.push(h('p', { class: 'bound-line', data: { field: 'bound-per-key', maxWaitingPerKey: String(kcap) } },
          'At most ', h('strong', {}, fmtInt(kcap)), ' unfinished jobs per limit key',
          parts > 1 ? ' (' + fmtInt(Math.ceil(kcap / parts)) + ' a partition)' : '',
          h('span', { class: 'badge bound-policy', data: { policy: 'reject' } }, 'reject')));
      } else {
        rows.push(h('p', { class: 'muted bound-line', data: { field: 'bound-per-key', maxWaitingPerKey: '0' } },
          'No bound per limit key.'));
      }
      rows.push(h('dl', { class: 'counters bound-counters' },
        h('div', { data: { field: 'rejected_full' }, title: 'Publishes refused at the bound (policy reject) or at a limit key\'s bound.' },
          h('dt', {}, 'Refused: queue full'), h('dd', {}, fmtInt(st && st.rejected_full))),
        h('div', { data: { field: 'dropped_full' }, title: 'Waiting jobs canceled at the bound to take new ones (policy drop-oldest).' },
          h('dt', {}, 'Dropped: queue full'), h('dd', {}, fmtInt(st && st.dropped_full)))));
      summary.replaceChildren(...rows);
    };
    const load = async () => {
      try {
        const body = await api('GET', base);
        if (!live(g) || !body) return;
        set = body;
        max.value = String(num(set.max_waiting));
        policy.value = set.full_policy || 'reject';
        perKey.value = String(num(set.max_waiting_per_key));
        draw();
      } catch (e) {
        if (live(g)) summary.replaceChildren(errorBox('Could not load the bound', e));
      }
    };
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const n = Number(max.value), k = Number(perKey.value);
      if (max.value.trim() === '' || !Number.isInteger(n) || n < 0 ||
        perKey.value.trim() === '' || !Number.isInteger(k) || k < 0) {
        notify('bad', 'The bound is a whole number of jobs, 0 or more (0: no bound).');
        return;
      }
      try {
        await api('PATCH', base, { max_waiting: n, full_policy: policy.value, max_waiting_per_key: k });
        notify('ok', n > 0 ? 'Bounded ' + q + ' to ' + fmtInt(n) + ' waiting jobs.' : 'Removed the bound of ' + q + '.');
        await load();
      } catch (e) {
        notify('bad', 'Could not set the bound: ' + e.message);
      }
    });
    load();
    return {
      el: h('section', { class: 'card bound', 'aria-labelledby': 'b-h' }, h('h2', { id: 'b-h' }, 'Bound'), summary, form),
      update(stats) { st = stats; draw(); },
    };
  }

  // Paging cursors of each list, kept while the tab lives so Back returns to the same page.
  const cursorStacks = new Map();

  // jobList: a page of a queue's jobs in one state, with Next/Previous; the dead list has
  // replay and purge.
  function jobList(q, state) {
    const g = gen;
    const key = q + '\u0000' + state;
    if (!cursorStacks.has(key)) cursorStacks.set(key, ['']);
    const stack = cursorStacks.get(key);
    const dead = state === 'failed';
    const selected = new Set(); // the dead rows checked, by job id
    const title = (STATES.find(([st]) => st === state) || [state, state])[1];
    const err = h('div', {});
    const body = h('div', { class: 'list-body' });
    const pageNo = h('span', { class: 'page-no', 'aria-live': 'polite' });
    const prev = h('button', { type: 'button', class: 'prev', onclick: () => { stack.pop(); load(); } }, '← Previous');
    const next = h('button', { type: 'button', class: 'next', onclick: () => { if (nextCursor) { stack.push(nextCursor); load(); } } }, 'Next →');
    const tools = h('div', { class: 'toolbar' },
      h('button', { type: 'button', onclick: () => load() }, 'Refresh'));
    let selTools = null; // the dead list's purge all and selection buttons
    const refreshSelection = () => { if (selTools) selTools.update(); };
    if (dead) {
      selTools = deadTools(q, selected, () => deadCount, () => { stack.length = 1; load(); });
      const all = h('span', { class: 'replay-all' });
      all.append(h('button', {
        type: 'button', class: 'replay-all-btn',
        onclick: async () => {
          if (!(await confirmInline(all, 'Replay all ' + fmtInt(deadCount) + ' dead jobs of ' + q + '?', 'Replay all'))) return;
          try {
            const r = await api('POST', 'queues/' + enc(q) + '/dead:replay');
            notify('ok', 'Replayed ' + fmtInt(r && r.replayed) + ' dead jobs of ' + q + '.');
          } catch (e) {
            notify('bad', 'Replay all failed: ' + e.message);
          }
          stack.length = 1;
          load();
        },
      }, 'Replay all'));
      tools.append(all, selTools.el);
    }
    let nextCursor = '';
    let deadCount = 0; // the dead gauge when the page last loaded: the count "all" confirms
    const pager = h('div', { class: 'pager' }, prev, pageNo, next);
    main().replaceChildren(heading('Queue ' + q), tabs(q, state, null),
      h('section', { class: 'card', 'aria-labelledby': 'l-h' },
        h('div', { class: 'list-head' }, h('h2', { id: 'l-h' }, title + ' jobs'), tools),
        err, body,
        pager));

    const cols = [['Job'], ['Type'], ['Payload'], ['Attempt']];
    if (dead) cols.unshift(['Select']);
    if (state === 'waiting') cols.push(['Workflow'], ['Why']);
    if (state === 'scheduled') cols.push(['Runs'], ['Why'], ['Last error'], ['Actions']);
    if (state === 'queued') cols.push(['Enqueued'], ['Why'], ['Actions']);
    if (state === 'in_progress') cols.push(['Worker'], ['Started'], ['Lease idle'], ['Deliveries']);
    if (dead) cols.push(['Reason'], ['Dead since'], ['Actions']);
    if (state === 'completed') cols.push(['Worker'], ['Completed'], ['Created']);
    if (state === 'canceled') cols.push(['Canceled'], ['Created']);

    function row(j, leases) {
      const cells = [
        h('td', { class: 'id', data: { label: 'Job' } }, h('a', { href: jobHref(q, j.id) }, j.id)),
        h('td', { data: { label: 'Type' } }, j.type),
        h('td', { class: 'payload', data: { label: 'Payload' } }, payloadPreview(j.payload, !!(j.encrypted && j.encrypted.payload))),
        h('td', { class: 'num', data: { label: 'Attempt' } }, fmtInt(j.attempt) + ' of ' + fmtInt(num(j.max_retries) + 1)),
      ];
      if (state === 'scheduled') {
        const tr = h('tr', { data: { job: j.id, scheduledFor: j.scheduled_for || 'delay' }, class: j.scheduled_for ? 'is-' + j.scheduled_for : null });
        cells.push(h('td', { data: { label: 'Runs' } }, timeEl(j.run_at, true)),
          whyCell(j),
          h('td', { class: 'reason', data: { label: 'Last error' } }, fold(j.last_error)),
          rowActions(q, j, tr, true));
        return put(tr, cells);
      }
      if (state === 'queued') {
        const tr = h('tr', { data: { job: j.id } });
        cells.push(h('td', { data: { label: 'Enqueued' } }, timeEl(j.enqueued_at, true)), whyCell(j), rowActions(q, j, tr, false));
        return put(tr, cells);
      }
      if (state === 'waiting') {
        cells.push(h('td', { class: 'wrap', data: { label: 'Workflow' } }, j.workflow
          ? [h('a', { class: 'id', href: wfHref(q, j.workflow) }, j.workflow), j.task ? h('span', { class: 'muted' }, ' · task ' + j.task) : null]
          : h('span', { class: 'muted' }, '—')),
        whyCell(j));
      }
      if (state === 'completed') {
        cells.push(h('td', { class: 'wrap', data: { label: 'Worker' } }, j.worker || '—'),
          h('td', { data: { label: 'Completed' } }, timeEl(j.completed_at, true)),
          h('td', { data: { label: 'Created' } }, timeEl(j.created_at, true)));
      }
      if (state === 'canceled') {
        cells.push(h('td', { data: { label: 'Canceled' } }, timeEl(j.completed_at, true)),
          h('td', { data: { label: 'Created' } }, timeEl(j.created_at, true)));
      }
      if (state === 'in_progress') {
        const l = (leases && leases[j.id]) || {};
        cells.push(h('td', { class: 'wrap', data: { label: 'Worker' } }, l.worker || j.worker || '—'),
          h('td', { data: { label: 'Started' } }, timeEl(j.started_at, true)),
          h('td', { class: 'num', data: { label: 'Lease idle' } }, l.idle_ms !== undefined ? fmtDur(l.idle_ms) : '—'),
          h('td', { class: 'num', data: { label: 'Deliveries' } }, l.deliveries !== undefined ? fmtInt(l.deliveries) : '—'));
      }
      if (dead) {
        const actions = h('td', { class: 'actions', data: { label: 'Actions' } });
        const tr = h('tr', { data: { job: j.id } });
        actions.append(
          h('button', { type: 'button', class: 'replay', 'aria-label': 'Replay job ' + j.id, onclick: () => replayJob(q, j.id, tr) }, 'Replay'), ' ',
          h('button', { type: 'button', class: 'purge danger', 'aria-label': 'Purge job ' + j.id, onclick: () => purgeJob(q, j.id, actions, tr) }, 'Purge'));
        const box = h('input', { type: 'checkbox', class: 'select', 'aria-label': 'Select job ' + j.id, checked: selected.has(j.id),
          onchange: (ev) => { if (ev.target.checked) selected.add(j.id); else selected.delete(j.id); refreshSelection(); } });
        cells.unshift(h('td', { class: 'select-cell', data: { label: 'Select' } }, box));
        cells.push(h('td', { class: 'reason', data: { label: 'Reason' } }, fold(j.last_error)),
          h('td', { data: { label: 'Dead since' } }, timeEl(j.completed_at, true)), actions);
        put(tr, cells);
        return tr;
      }
      return h('tr', { data: { job: j.id } }, cells);
    }

    async function load() {
      const cursor = stack[stack.length - 1];
      prev.disabled = stack.length <= 1;
      try {
        const qs = 'status=' + enc(state) + '&limit=' + PAGE_LIMIT + (cursor ? '&cursor=' + enc(cursor) : '');
        const [page, st] = await Promise.all([api('GET', 'queues/' + enc(q) + '/jobs?' + qs), queueStats(q)]);
        if (!live(g)) return;
        err.replaceChildren();
        updateTabCounts(st);
        deadCount = num(st && st.dead);
        const jobs = (page && page.jobs) || [];
        if (dead) { // a selection holds only rows that show
          const shown = new Set(jobs.map((j) => j.id));
          for (const id of selected) if (!shown.has(id)) selected.delete(id);
          refreshSelection();
        }
        nextCursor = (page && page.next) || '';
        next.disabled = !nextCursor;
        pageNo.textContent = 'Page ' + stack.length;
        pager.hidden = stack.length <= 1 && !nextCursor;
        if (jobs.length === 0) {
          body.replaceChildren(h('p', { class: 'muted empty' }, stack.length > 1
            ? 'No more ' + title.toLowerCase() + ' jobs on this page.'
            : 'No ' + title.toLowerCase() + ' jobs in ' + q + '.'));
        } else {
          body.replaceChildren(h('table', { class: 'grid-table jobs' },
            h('caption', { class: 'visually-hidden' }, title + ' jobs of ' + q + ', page ' + stack.length),
            h('thead', {}, h('tr', {}, cols.map(([c]) => h('th', { scope: 'col' }, c)))),
            h('tbody', {}, jobs.map((j) => row(j, page.leases)))));
        }
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not load the jobs', e));
      }
    }
    load();
    // Lists reload on Refresh, paging and actions only: rows do not move under the pointer.
    return { refresh: async () => { try { updateTabCounts(await queueStats(q)); } catch (_) { /* shown on load */ } } };
  }

  // ---- Across queues: the Dead, Retries and Scheduled pages (GET v1/jobs?status=S) ----

  // GLOBAL are the pages that list one status's jobs of every queue, as Sidekiq Web's do.
  // Retries has no status of its own: a retry is a scheduled job waiting for its backoff, so
  // its page reads the scheduled jobs and keeps the retries (a filter here, in the browser).
  const GLOBAL = {
    dead: { status: 'failed', title: 'Dead', what: 'dead jobs',
      help: 'Jobs of every queue that failed for good: retries used up, a SkipRetry error, a worker lost on the last attempt. Replay one to run it again.' },
    retries: { status: 'scheduled', title: 'Retries', what: 'retries', filter: isRetry,
      help: 'Scheduled jobs of every queue waiting for a retry\'s backoff after a failed attempt. ' +
        'This page reads the scheduled jobs and shows the retries among them, so a page may show fewer than it read.' },
    scheduled: { status: 'scheduled', title: 'Scheduled', what: 'scheduled jobs',
      help: 'Jobs of every queue waiting for their time (a delay, a retry\'s backoff, a snooze) or for a slot of a concurrency limit.' },
  };
  const RETRY_READ_LIMIT = 200; // the scheduled jobs the Retries page reads a request
  const RETRY_READS = 5; // and the requests a page makes at most while it has found no retry

  // globalList is one of the GLOBAL pages: a page of a status's jobs across the queues, each row
  // naming its queue, with Next/Previous, and the row actions of the queue's own lists.
  function globalList(name) {
    const g = gen;
    const def = GLOBAL[name];
    const key = '*\u0000' + name;
    if (!cursorStacks.has(key)) cursorStacks.set(key, ['']);
    const stack = cursorStacks.get(key);
    const dead = def.status === 'failed';
    const err = h('div', {});
    const body = h('div', { class: 'list-body' });
    const pageNo = h('span', { class: 'page-no', 'aria-live': 'polite' });
    const prev = h('button', { type: 'button', class: 'prev', onclick: () => { stack.pop(); load(); } }, '← Previous');
    const next = h('button', { type: 'button', class: 'next', onclick: () => { if (nextCursor) { stack.push(nextCursor); load(); } } }, 'Next →');
    const pager = h('div', { class: 'pager' }, prev, pageNo, next);
    let nextCursor = '';
    main().replaceChildren(heading(def.title),
      h('section', { class: 'card global-list', 'aria-labelledby': 'gl-h', data: { global: name } },
        h('div', { class: 'list-head' }, h('h2', { id: 'gl-h' }, capital(def.what) + ' of all queues'),
          h('div', { class: 'toolbar' }, h('button', { type: 'button', onclick: () => load() }, 'Refresh'))),
        h('p', { class: 'muted small' }, def.help),
        err, body, pager));

    const cols = ['Job', 'Queue', 'Type', 'Payload', 'Attempt'].concat(dead ? ['Reason', 'Dead since', 'Actions']
      : name === 'retries' ? ['Next try', 'Last error', 'Why', 'Actions'] : ['Runs', 'Why', 'Last error', 'Actions']);

    function row(j) {
      const q = j.queue;
      const tr = h('tr', { data: { job: j.id, queue: q } });
      const cells = [
        h('td', { class: 'id', data: { label: 'Job' } }, h('a', { href: jobHref(q, j.id) }, j.id)),
        h('td', { class: 'wrap', data: { label: 'Queue', field: 'queue' } }, h('a', { href: queueHref(q, def.status) }, q)),
        h('td', { data: { label: 'Type' } }, j.type),
        h('td', { class: 'payload', data: { label: 'Payload' } }, payloadPreview(j.payload, !!(j.encrypted && j.encrypted.payload))),
        h('td', { class: 'num', data: { label: 'Attempt' } }, fmtInt(j.attempt) + ' of ' + fmtInt(num(j.max_retries) + 1)),
      ];
      if (dead) {
        const actions = h('td', { class: 'actions', data: { label: 'Actions' } },
          h('button', { type: 'button', class: 'replay', 'aria-label': 'Replay job ' + j.id + ' of ' + q, onclick: () => replayJob(q, j.id, tr) }, 'Replay'), ' ');
        actions.append(h('button', { type: 'button', class: 'purge danger', 'aria-label': 'Purge job ' + j.id + ' of ' + q, onclick: () => purgeJob(q, j.id, actions, tr) }, 'Purge'));
        cells.push(h('td', { class: 'reason', data: { label: 'Reason' } }, fold(j.last_error)),
          h('td', { data: { label: 'Dead since' } }, timeEl(j.completed_at, true)), actions);
      } else if (name === 'retries') {
        cells.push(h('td', { data: { label: 'Next try' } }, timeEl(j.run_at, true)),
          h('td', { class: 'reason', data: { label: 'Last error' } }, fold(j.last_error)), whyCell(j), rowActions(q, j, tr, true));
      } else {
        cells.push(h('td', { data: { label: 'Runs' } }, timeEl(j.run_at, true)), whyCell(j),
          h('td', { class: 'reason', data: { label: 'Last error' } }, fold(j.last_error)), rowActions(q, j, tr, true));
      }
      return put(tr, cells);
    }

    async function load() {
      const cursor = stack[stack.length - 1];
      prev.disabled = stack.length <= 1;
      try {
        // Retries reads on until it finds one, or it has read RETRY_READS requests' worth.
        let jobs = [], read = 0, at = cursor, reads = 0;
        do {
          const limit = def.filter ? RETRY_READ_LIMIT : PAGE_LIMIT;
          const page = await api('GET', 'jobs?status=' + enc(def.status) + '&limit=' + limit + (at ? '&cursor=' + enc(at) : ''));
          const got = (page && page.jobs) || [];
          read += got.length;
          jobs = jobs.concat(def.filter ? got.filter(def.filter) : got);
          at = (page && page.next) || '';
          reads++;
        } while (def.filter && at && jobs.length === 0 && reads < RETRY_READS);
        allQueues().catch(() => { /* the counts stay as they were */ });
        if (!live(g)) return;
        err.replaceChildren();
        nextCursor = at;
        next.disabled = !nextCursor;
        pageNo.textContent = 'Page ' + stack.length;
        pager.hidden = stack.length <= 1 && !nextCursor;
        if (jobs.length === 0) {
          body.replaceChildren(h('p', { class: 'muted empty' }, def.filter && nextCursor
            ? 'No retries among the ' + plural(read, 'scheduled job', 'scheduled jobs') + ' read; Next reads on.'
            : stack.length > 1 ? 'No more ' + def.what + '.' : 'No ' + def.what + ' in any queue.'));
        } else {
          body.replaceChildren(h('table', { class: 'grid-table jobs global' },
            h('caption', { class: 'visually-hidden' }, capital(def.what) + ' of all queues, page ' + stack.length),
            h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
            h('tbody', {}, jobs.map(row))),
          def.filter ? h('p', { class: 'muted small', data: { read: String(read) } },
            plural(jobs.length, 'retry', 'retries') + ' among ' + plural(read, 'scheduled job', 'scheduled jobs') + ' read.') : '');
        }
        stamp();
      } catch (e) {
        if (!live(g)) return;
        err.replaceChildren(e.status === 404
          ? h('div', { class: 'error-box', role: 'alert' }, 'This server cannot list jobs across queues (GET /v1/jobs): each queue\'s own lists show its ' + def.what + '.')
          : errorBox('Could not load the ' + def.what, e));
      }
    }
    load();
    // Like a queue's lists, it reloads on Refresh, paging and actions only.
    return {};
  }

  // payloadPreview is a list cell's look at a job's payload: its first characters, with the
  // whole (up to a limit) as the title.
  function payloadPreview(v, sealed) {
    if (v === null || v === undefined || v === '') return h('span', { class: 'muted' }, '—');
    const text = (sealed ? '\u{1F512} ' : '') + (typeof v === 'string' ? v : JSON.stringify(v));
    const short = text.length > PREVIEW_CHARS ? text.slice(0, PREVIEW_CHARS) + '…' : text;
    return h('code', { class: 'preview', title: text.slice(0, 2000) }, short);
  }

  // whyBadge says why a scheduled job waits for its time: a retry after a failed attempt, a
  // snooze, or the delay it was published with (its reason's cause, or else its scheduled_for).
  function whyBadge(j) {
    const cause = (j.waiting_for && j.waiting_for.cause) || j.scheduled_for;
    const why = cause === 'retry' ? 'retry' : cause === 'snooze' ? 'snoozed' : 'delayed';
    const tip = why === 'retry' ? 'A retry: an attempt failed, and the job waits for its backoff. Its last error is beside it.'
      : why === 'snoozed' ? 'Snoozed by its handler: it runs again at its time, and keeps its retries.'
        : 'Published with a delay or a time to run at.';
    return h('span', { class: 'why-badge why-' + why, title: tip, data: { why } }, why);
  }

  // reasonBadge is a reason's short label (waiting_for), with what the job waits for as its
  // title.
  function reasonBadge(w) {
    const help = REASON_HELP.get(w.kind);
    return h('span', { class: 'why-badge why-kind why-' + (REASON_TONE[w.kind] || 'wait'), data: { why: w.kind },
      title: help ? 'Waiting for ' + help + '.' : null }, reasonLabel(w));
  }

  // whyCell is a list row's Why: the reason its job is not running (waiting_for), as a badge
  // and its detail cut short (the whole as its title). A due job's badge says retry, snoozed or
  // delayed. A job the server gave no reason (it runs, or the server is older) shows the
  // scheduled badge alone, or a dash.
  function whyCell(j) {
    const w = j.waiting_for;
    const td = h('td', { class: 'why', data: w && w.kind ? { label: 'Why', field: 'why', kind: w.kind } : { label: 'Why', field: 'why' } });
    if (!w || !w.kind) return put(td, [j.status === 'scheduled' ? whyBadge(j) : h('span', { class: 'muted' }, '—')]);
    const detail = String(w.detail || '');
    return put(td, [w.kind === 'due' ? whyBadge(j) : reasonBadge(w), detail ? [' ', h('span', { class: 'why-detail', title: detail.length > WHY_CHARS ? detail : null },
      detail.length > WHY_CHARS ? detail.slice(0, WHY_CHARS - 1) + '…' : detail)] : null]);
  }

  // fold shows an error: a short one as it is, a long one (or one of several lines) folded to
  // its first line, the whole shown on a click.
  function fold(text) {
    if (!text) return h('span', { class: 'muted' }, '—');
    const first = text.split('\n')[0];
    if (text.length <= FOLD_CHARS && first === text) return text;
    return h('details', { class: 'fold' },
      h('summary', {}, first.length > FOLD_CHARS ? first.slice(0, FOLD_CHARS) + '…' : first + ' …'),
      h('pre', { class: 'code' }, text));
  }

  // rowActions are a scheduled or queued row's buttons: run now (scheduled only: into the
  // stream at once), cancel (a canceled record stays) and delete (nothing stays). The row goes
  // once done.
  function rowActions(q, j, tr, scheduled) {
    const td = h('td', { class: 'actions', data: { label: 'Actions' } });
    const base = 'queues/' + enc(q) + '/jobs/' + enc(j.id);
    const act = async (what, verb, method, path, confirmQ, yes) => {
      if (confirmQ && !(await confirmInline(td, confirmQ, yes))) return;
      try {
        await api(method, path);
        tr.remove();
        notify('ok', what + ' job ', h('a', { href: jobHref(q, j.id), class: 'id' }, j.id), '.');
        try { updateTabCounts(await queueStats(q)); } catch (_) { /* next refresh */ }
      } catch (e) {
        notify('bad', 'Could not ' + verb + ' ' + j.id + ': ' + e.message);
      }
    };
    if (scheduled) {
      td.append(h('button', { type: 'button', class: 'run-now', 'aria-label': 'Run job ' + j.id + ' now',
        title: 'Move it into the stream now: a worker takes it at once',
        onclick: () => act('Moved into the stream', 'run now', 'POST', base + '/run') }, 'Run now'), ' ');
    }
    td.append(
      h('button', { type: 'button', class: 'cancel', 'aria-label': 'Cancel job ' + j.id, title: 'It never runs; a canceled record stays to read',
        onclick: () => act('Canceled', 'cancel', 'DELETE', base, 'Cancel ' + j.id + '?', 'Cancel job') }, 'Cancel'), ' ',
      h('button', { type: 'button', class: 'delete danger', 'aria-label': 'Delete job ' + j.id, title: 'It never runs, and no record stays',
        onclick: () => act('Deleted', 'delete', 'POST', base + '/delete', 'Delete ' + j.id + ', leaving no record?', 'Delete') }, 'Delete'));
    return td;
  }

  // deadTools are the dead list's bulk actions: purge all, and replay or purge the rows
  // selected. Each asks first, saying how many; a selection is done one job at a time (the API
  // takes one id a call) and ends with a summary. update() follows the selection.
  function deadTools(q, selected, count, reload) {
    const el = h('span', { class: 'dead-tools' });
    const purgeAll = h('button', { type: 'button', class: 'purge-all-btn danger', onclick: async () => {
      if (!(await confirmInline(el, 'Purge all ' + fmtInt(count()) + ' dead jobs of ' + q + ' for good?', 'Purge all'))) return;
      try {
        const r = await api('DELETE', 'queues/' + enc(q) + '/dead');
        notify('ok', 'Purged ' + fmtInt(r && r.purged) + ' dead jobs of ' + q + '.');
      } catch (e) {
        notify('bad', 'Purge all failed: ' + e.message);
      }
      reload();
    } }, 'Purge all');
    const bulk = (verb, method, path) => async () => {
      const ids = Array.from(selected);
      if (ids.length === 0) return;
      const n = ids.length + ' selected dead job' + (ids.length === 1 ? '' : 's');
      if (!(await confirmInline(el, verb + ' the ' + n + (verb === 'Purge' ? ' for good?' : '?'), verb + ' ' + ids.length))) return;
      const failed = [];
      for (const id of ids) {
        try {
          await api(method, path(id));
        } catch (e) {
          failed.push(id + ': ' + e.message);
        }
      }
      const done = ids.length - failed.length;
      notify(failed.length ? 'bad' : 'ok', (verb === 'Replay' ? 'Replayed ' : 'Purged ') + done + ' of the ' + n + '.' +
        (failed.length ? ' Not done: ' + failed.join('; ') : ''));
      selected.clear();
      reload();
    };
    const base = 'queues/' + enc(q) + '/dead/';
    const replaySel = h('button', { type: 'button', class: 'replay-selected', onclick: bulk('Replay', 'POST', (id) => base + enc(id) + '/replay') });
    const purgeSel = h('button', { type: 'button', class: 'purge-selected danger', onclick: bulk('Purge', 'DELETE', (id) => base + enc(id)) });
    const update = () => {
      for (const id of Array.from(selected)) if (!document.querySelector('tr[data-job="' + CSS.escape(id) + '"]')) selected.delete(id);
      const n = selected.size;
      replaySel.textContent = 'Replay selected (' + n + ')';
      purgeSel.textContent = 'Purge selected (' + n + ')';
      replaySel.disabled = purgeSel.disabled = n === 0;
    };
    update();
    el.append(purgeAll, ' ', replaySel, ' ', purgeSel);
    return { el, update };
  }

  async function replayJob(q, id, tr) {
    try {
      await api('POST', 'queues/' + enc(q) + '/dead/' + enc(id) + '/replay');
      if (tr) tr.remove();
      notify('ok', 'Replayed job ', h('a', { href: jobHref(q, id), class: 'id' }, id), '.');
      try { updateTabCounts(await queueStats(q)); } catch (_) { /* next refresh */ }
      return true;
    } catch (e) {
      notify('bad', 'Could not replay ' + id + ': ' + e.message);
      return false;
    }
  }

  async function purgeJob(q, id, confirmIn, tr) {
    if (!(await confirmInline(confirmIn, 'Purge ' + id + ' for good?', 'Purge'))) return false;
    try {
      await api('DELETE', 'queues/' + enc(q) + '/dead/' + enc(id));
      if (tr) tr.remove();
      notify('ok', 'Purged job ' + id + '.');
      try { updateTabCounts(await queueStats(q)); } catch (_) { /* next refresh */ }
      return true;
    } catch (e) {
      notify('bad', 'Could not purge ' + id + ': ' + e.message);
      return false;
    }
  }

  // streamEvents reads an events stream (Server-Sent Events) of the API and calls onEvent(name,
  // data) with each event's name and parsed JSON data; it resolves when the stream ends. It
  // reads with fetch, not EventSource: EventSource cannot send the Authorization header the
  // API may need. A 401 or another refusal rejects it (the page falls back to polling).
  async function streamEvents(path, signal, onEvent) {
    const headers = { Accept: 'text/event-stream' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const res = await fetch(API + path, { headers, cache: 'no-store', credentials: 'same-origin', signal });
    if (!res.ok || !res.body) throw new APIError(res.status, 'http_' + res.status, 'HTTP ' + res.status);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let name = 'message', data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) name = line.slice(6).trim();
          else if (line.startsWith('data:')) data += (data ? '\n' : '') + line.slice(5).replace(/^ /, '');
        }
        if (!data) continue; // a heartbeat comment
        let v;
        try { v = JSON.parse(data); } catch (_) { continue; }
        onEvent(name, v);
      }
    }
  }

  // progressCard shows a job's last progress report: a bar, the percent and the message.
  function progressCard(j) {
    const bar = h('progress', { max: '100', value: String(num(j.progress)), 'aria-labelledby': 'j-prog' });
    const text = h('p', { class: 'progress-text' });
    const card = h('section', { class: 'card progress-card', 'aria-labelledby': 'j-prog' },
      h('h2', { id: 'j-prog' }, FINAL.has(j.status) ? 'Last progress' : 'Progress'), bar, text);
    setProgress(card, j);
    return card;
  }

  // setProgress updates a progress card in place (the bar moves, nothing is rebuilt).
  function setProgress(card, j) {
    const p = Math.max(0, Math.min(100, num(j.progress)));
    const bar = card.querySelector('progress');
    bar.value = p;
    bar.dataset.progress = String(p);
    const text = card.querySelector('.progress-text');
    text.replaceChildren(h('strong', {}, p + '%'), j.progress_message ? ' ' + j.progress_message : '',
      num(j.progress_at) ? h('span', { class: 'muted small' }, ' · ', timeEl(j.progress_at, true)) : '');
  }

  // jobPage: everything about one job; it refreshes until the job is finished. While the job
  // runs, its events stream keeps the page live (status changes, the progress bar) and the
  // polling waits; when the stream cannot be had, the page polls.
  function jobPage(q, id) {
    const g = gen;
    const content = h('div', { class: 'job' }, h('p', { class: 'loading' }, 'Loading…'));
    main().replaceChildren(
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' },
        h('a', { href: '#/queues' }, 'Queues'), ' › ', h('a', { href: queueHref(q) }, q), ' › ', h('span', { class: 'id' }, id)),
      heading('Job ' + id),
      content);
    let status = '';
    let cur = null; // the job as last shown
    let stream = null; // the events stream's AbortController while it is open
    let last = ''; // the answer last shown: an unchanged one is not drawn again
    const show = (j) => {
      cur = j;
      status = j.status;
      if (content.querySelector('.confirm')) return; // the next event or poll shows it
      const card = content.querySelector('.progress-card');
      const badgeEl = content.querySelector('.job-status .badge');
      if (card && badgeEl && j.progress !== undefined && j.progress !== null && !FINAL.has(j.status) &&
          badgeEl.dataset.status === j.status) {
        setProgress(card, j); // the bar moves; the page stays as it is
      } else {
        renderJob(content, j);
      }
      stamp();
    };
    const follow = () => {
      if (stream || FINAL.has(status) || !live(g)) return;
      const ctl = new AbortController();
      stream = ctl;
      content.dataset.live = 'on';
      streamEvents('queues/' + enc(q) + '/jobs/' + enc(id) + '/events', ctl.signal, (name, d) => {
        if (!live(g)) { ctl.abort(); return; }
        last = ''; // what shows is the event's now: the next read is drawn
        // A status the job waits in, told without its reason: the job is read for it.
        if (name === 'status' && !d.waiting_for && !FINAL.has(d.status) && d.status !== 'in_progress') refresh(true);
        else if (name === 'status') show(d);
        else if (name === 'progress' && cur) {
          show(Object.assign({}, cur, { status: d.status, attempt: d.attempt, progress: d.progress,
            progress_message: d.progress_message, progress_at: d.progress_at }));
        }
      }).catch(() => { /* closed, refused or cut: polling takes over */ }).finally(() => {
        if (stream === ctl) stream = null;
        delete content.dataset.live;
      });
    };
    // refresh reads the job. Not once it is finished, nor under a question the user is
    // answering, nor while it runs and the events stream keeps the page live (unless forced).
    // A job that waits is read still: its reason can change with no event of its own (a pause,
    // a slot taken or given back).
    const refresh = async (force) => {
      if (FINAL.has(status) || (stream && status === 'in_progress' && force !== true) || content.querySelector('.confirm')) return;
      try {
        const j = await api('GET', 'queues/' + enc(q) + '/jobs/' + enc(id));
        if (!live(g)) return;
        const text = JSON.stringify(j);
        if (text === last && cur) {
          stamp();
          return;
        }
        last = text;
        show(j);
        follow();
      } catch (e) {
        if (!live(g)) return;
        if (e.status === 404) {
          status = 'completed'; // nothing more to poll
          content.replaceChildren(h('div', { class: 'error-box', role: 'alert' },
            'No job ' + id + ' in queue ' + q + '. Finished jobs are kept for the retention time only.'));
        } else {
          content.replaceChildren(errorBox('Could not load the job', e));
        }
      }
    };
    refresh();
    return { refresh, leave: () => { if (stream) stream.abort(); } };
  }

  function renderJob(content, j) {
    const q = j.queue;
    const again = () => route(); // a fresh page, polling again until the job is finished
    const actions = h('div', { class: 'toolbar job-actions' },
      h('button', { type: 'button', class: 'reload', onclick: again }, 'Refresh'));
    if (!FINAL.has(j.status)) {
      actions.append(h('button', {
        type: 'button', class: 'cancel danger',
        onclick: async () => {
          if (!(await confirmInline(actions, 'Cancel job ' + j.id + '?', 'Cancel job'))) return;
          try {
            await api('DELETE', 'queues/' + enc(q) + '/jobs/' + enc(j.id));
            notify('ok', 'Canceled job ' + j.id + '.');
          } catch (e) {
            notify('bad', 'Could not cancel ' + j.id + ': ' + e.message);
          }
          again();
        },
      }, 'Cancel job'));
    }
    if (j.status === 'failed') {
      actions.append(
        h('button', { type: 'button', class: 'replay', onclick: async () => { if (await replayJob(q, j.id)) again(); } }, 'Replay'), ' ',
        h('button', { type: 'button', class: 'purge danger', onclick: async () => { if (await purgeJob(q, j.id, actions)) location.hash = queueHref(q, 'failed'); } }, 'Purge'));
    }
    const finishedLabel = { completed: 'Completed', failed: 'Dead since', canceled: 'Canceled' }[j.status] || 'Finished';
    const field = (name, value, key) => h('div', { data: { field: key } }, h('dt', {}, name), h('dd', {}, value));
    const md = Object.entries(j.metadata || {});
    content.replaceChildren(
      h('div', { class: 'job-status' }, 'Status ', badge(j.status), actions),
      j.status === 'waiting' && !j.waiting_for ? h('p', { class: 'muted wait-note' },
        'It waits for the tasks it runs after in its workflow: it is queued once they are done.') : '',
      waitingCard(j),
      h('div', { class: 'cols' },
        h('section', { class: 'card', 'aria-labelledby': 'j-sum' }, h('h2', { id: 'j-sum' }, 'Summary'),
          h('dl', { class: 'fields' },
            field('Queue', h('a', { href: queueHref(q) }, q), 'queue'),
            field('Type', j.type, 'type'),
            // A task of a workflow (or a batch's job or callback): its workflow's page.
            j.workflow ? field('Workflow', [h('a', { class: 'id wf-link', href: wfHref(q, j.workflow) }, j.workflow),
              j.task ? h('span', { class: 'muted' }, ' · task ' + j.task) : null], 'workflow') : null,
            // River's levels: 1 is served first (and the default), 4 last.
            field('Priority', fmtInt(num(j.priority) || 1) + ({ 1: ' (first)', 4: ' (last)' }[num(j.priority) || 1] || ''), 'priority'),
            field('Attempts', fmtInt(j.attempt) + ' of ' + fmtInt(num(j.max_retries) + 1) + ' (max retries ' + fmtInt(j.max_retries) + ')', 'attempt'),
            field('Timeout', num(j.timeout_ms) ? fmtDur(j.timeout_ms) : 'none', 'timeout'),
            field('Worker', j.worker || '—', 'worker'),
            field('Stream entry', j.entry || '—', 'entry'),
            field('Version', fmtInt(j.version), 'version'))),
        h('section', { class: 'card', 'aria-labelledby': 'j-times' }, h('h2', { id: 'j-times' }, 'Times'),
          h('dl', { class: 'fields' },
            field('Created (first publish)', timeEl(j.created_at), 'created_at'),
            field('Due', timeEl(j.run_at), 'run_at'),
            field('Last enqueued', timeEl(j.enqueued_at), 'enqueued_at'),
            field('Started', timeEl(j.started_at), 'started_at'),
            field(finishedLabel, timeEl(j.completed_at), 'completed_at')))),
      // The handler's last progress report (Job.Progress), live while the job runs.
      j.progress !== undefined && j.progress !== null ? progressCard(j) : '',
      attemptsCard(j),
      logsCard(j),
      j.last_error ? h('section', { class: 'card last-error', 'aria-labelledby': 'j-err' }, h('h2', { id: 'j-err' }, 'Last error'),
        j.status === 'failed' ? null : h('p', { class: 'muted small' }, 'From an earlier attempt.'),
        h('pre', { class: 'code error-text' }, j.last_error)) : '', // '', not null: replaceChildren would show "null"
      // A debounced job's window: its key, first publish, the latest it is due, and how many
      // publishes it took (the job JSON's debounce object).
      j.debounce ? h('section', { class: 'card debounce', 'aria-labelledby': 'j-db' }, h('h2', { id: 'j-db' }, 'Debounce'),
        h('dl', { class: 'fields' },
          field('Key', j.debounce.key, 'debounce_key'),
          field('First publish', timeEl(j.debounce.first_at), 'debounce_first'),
          field('Due at the latest', timeEl(j.debounce.until), 'debounce_until'),
          field('Publishes', fmtInt(j.debounce.publishes), 'debounce_publishes'))) : '',
      h('section', { class: 'card payload', 'aria-labelledby': 'j-pl' }, h('h2', { id: 'j-pl' }, 'Payload'), prettyValue(j.payload, !!(j.encrypted && j.encrypted.payload))),
      h('section', { class: 'card result', 'aria-labelledby': 'j-res' }, h('h2', { id: 'j-res' }, 'Result'), prettyValue(j.result, !!(j.encrypted && j.encrypted.result))),
      md.length ? h('section', { class: 'card', 'aria-labelledby': 'j-md' }, h('h2', { id: 'j-md' }, 'Metadata'),
        h('table', { class: 'kv' }, h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Key'), h('th', { scope: 'col' }, 'Value'))),
          h('tbody', {}, md.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v)))))) : '');
  }

  // waitingCard is the job page's "Waiting for": why a job that is not running waits (the job
  // JSON's waiting_for), the reason's label and detail, and the facts it rests on: until when
  // (counting down), the limit's scope and slots held, the group and the job's place in it, the
  // tasks it waits for, the jobs of a higher priority ahead. '' for a job running or ended, or
  // one the server gave no reason.
  function waitingCard(j) {
    const w = j.waiting_for;
    if (!w || !w.kind || FINAL.has(j.status) || j.status === 'in_progress') return '';
    const field = (name, value, key) => h('div', { data: { field: key } }, h('dt', {}, name), h('dd', {}, value));
    const help = REASON_HELP.get(w.kind);
    const tasks = w.tasks || [];
    const fields = [
      num(w.until) ? field(w.kind === 'due' ? 'Due' : 'Until', [h('time', { datetime: new Date(num(w.until)).toISOString() }, fmtTime(num(w.until))),
        ' ', h('span', { class: 'muted' }, '(', countdown(w.until), ')')], 'until') : null,
      w.scope ? field('Limit scope', w.scope, 'scope') : null,
      num(w.slots) ? field('Slots held', fmtInt(w.held) + ' of ' + fmtInt(w.slots), 'slots') : null,
      w.group ? field('Group', w.group, 'group') : null,
      num(w.position) ? field('Place in the group', fmtInt(w.position) + (num(w.position) === 1 ? ' (next)' : ''), 'position') : null,
      tasks.length ? field('Tasks', [tasks.slice(0, AFTER_SHOWN).join(', '), tasks.length > AFTER_SHOWN ? ' and ' + fmtInt(tasks.length - AFTER_SHOWN) + ' more' : '',
        j.workflow ? [' · ', h('a', { href: wfHref(j.queue, j.workflow) }, 'see the workflow')] : null], 'tasks') : null,
      num(w.jobs) ? field('Ahead of it', fmtInt(w.jobs) + ' jobs of a higher priority', 'jobs') : null,
    ].filter(Boolean);
    return h('section', { class: 'card waiting-for why-' + (REASON_TONE[w.kind] || 'wait'), 'aria-labelledby': 'j-wait', data: { kind: w.kind } },
      h('h2', { id: 'j-wait' }, 'Waiting for'),
      h('p', { class: 'wait-kind' }, h('strong', {}, reasonLabel(w)), help ? h('span', { class: 'muted' }, ': it waits for ' + help + '.') : ''),
      w.detail ? h('p', { class: 'wait-detail', data: { field: 'detail' } }, w.detail) : '',
      fields.length ? h('dl', { class: 'fields' }, fields) : '');
  }

  // attemptsCard: the job's attempts (the job JSON's attempts, oldest first, the last 20):
  // each one's worker, start, end, how long it ran, outcome and error. '' for a job that never
  // started.
  function attemptsCard(j) {
    const as = j.attempts || [];
    if (as.length === 0) return '';
    // "failed" is the wire name of the attempt that sent the job to the dead set; a replay's
    // mark (attempt 0) is no attempt: the attempts after it count from 1 again.
    const outcome = { retry: 'Retried', snooze: 'Snoozed', lost: 'Worker lost', failed: 'Dead', replayed: 'Replayed', completed: 'Completed', canceled: 'Canceled', running: 'Running' };
    return h('section', { class: 'card attempts', 'aria-labelledby': 'j-att' },
      h('h2', { id: 'j-att' }, 'Attempts'),
      num(j.attempt) > as.length ? h('p', { class: 'muted small' }, 'The last ' + fmtInt(as.length) + ' attempts.') : null,
      h('table', { class: 'grid-table attempts-table' },
        h('caption', { class: 'visually-hidden' }, 'Attempts of job ' + j.id + ', oldest first'),
        h('thead', {}, h('tr', {}, ['#', 'Outcome', 'Worker', 'Started', 'Ended', 'Took', 'Error'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, as.map((a) => h('tr', { data: { attempt: String(a.attempt), outcome: a.outcome } },
          h('td', { class: 'num', data: { label: '#' } }, a.outcome === 'replayed' ? '—' : fmtInt(a.attempt)),
          h('td', { data: { label: 'Outcome', field: 'outcome' } }, outcome[a.outcome] || a.outcome),
          h('td', { class: 'wrap', data: { label: 'Worker' } }, a.worker || '—'),
          h('td', { data: { label: 'Started' } }, timeEl(a.started_at, true)),
          h('td', { data: { label: 'Ended' } }, timeEl(a.ended_at, true)),
          h('td', { class: 'num', data: { label: 'Took' } }, num(a.started_at) && num(a.ended_at) && a.outcome !== 'replayed' ? fmtDur(a.ended_at - a.started_at) : '—'),
          h('td', { class: a.error ? 'reason' : '', data: { label: 'Error', field: 'error' } }, a.error || '—'))))));
  }

  // logsCard: the lines the job's handler logged (Job.Logger, Job.Logf), an attempt at a time,
  // beside the attempts (GET .../jobs/{id}/logs). An attempt's lines still sealed (its
  // "encrypted" field: this token may not see them) are their placeholder under a lock, as a
  // sealed payload is. It loads after the page, and again only when
  // the job's status or attempt changed: a progress event re-renders the page, and the lines
  // only change with an attempt's outcome. '' for a job that never started.
  let logsSeen = null; // { key, logs } of the last job page, the only one cached
  function logsCard(j) {
    if ((j.attempts || []).length === 0) return '';
    const body = h('div', { class: 'logs-body' }, h('p', { class: 'loading muted small' }, 'Loading the logs…'));
    const sec = h('section', { class: 'card logs', 'aria-labelledby': 'j-logs' }, h('h2', { id: 'j-logs' }, 'Logs'), body);
    const key = [j.queue, j.id, j.status, j.attempt].join('\n');
    const outcome = { retry: 'Retried', snooze: 'Snoozed', failed: 'Dead', completed: 'Completed', running: 'Running (up to its last progress report)', lost: 'Worker lost (up to its last progress report)', canceled: 'Canceled (up to its last progress report)' };
    const fill = (logs) => {
      if (!logs.length) {
        body.replaceChildren(h('p', { class: 'muted small' }, 'Its handler logged nothing. An attempt cut short (its worker killed, the job canceled while it ran, put back on shutdown) keeps only the lines written with its last progress report.'));
        return;
      }
      body.replaceChildren(...logs.map((a) => h('div', { class: 'log-attempt', data: { attempt: String(a.attempt), outcome: a.outcome } },
        h('h3', {}, 'Attempt ' + fmtInt(a.attempt) + ' · ' + (outcome[a.outcome] || a.outcome) + ' · ', timeEl(a.ended_at, true)),
        num(a.cut) ? h('p', { class: 'muted small log-cut' }, fmtInt(a.cut) + ' earlier lines cut (an attempt keeps its last 200 lines or 32 KiB).') : null,
        a.encrypted
          ? h('div', { class: 'sealed' }, h('p', { class: 'muted small' }, '\u{1F512} Encrypted at rest (the payload token shows it)'),
            h('pre', { class: 'code log-lines' }, (a.lines || []).join('\n')))
          : h('pre', { class: 'code log-lines' }, (a.lines || []).map(logLine).join('\n')))));
    };
    if (logsSeen && logsSeen.key === key) {
      fill(logsSeen.logs);
      return sec;
    }
    api('GET', 'queues/' + enc(j.queue) + '/jobs/' + enc(j.id) + '/logs').then((r) => {
      logsSeen = { key, logs: r.logs || [] };
      fill(logsSeen.logs);
    }, (e) => body.replaceChildren(errorBox('Could not load the logs', e)));
    return sec;
  }

  // logLine is one logged line as text: zerolog's JSON object as "time LEVEL message k=v ...",
  // any other line as it is.
  function logLine(line) {
    let o;
    try { o = JSON.parse(line); } catch (_) { return line; }
    if (!o || typeof o !== 'object' || Array.isArray(o)) return line;
    const parts = [];
    if (o.time) parts.push(String(o.time));
    if (o.level) parts.push(String(o.level).toUpperCase());
    if (o.message !== undefined) parts.push(String(o.message));
    for (const [k, v] of Object.entries(o)) {
      if (k === 'time' || k === 'level' || k === 'message') continue;
      parts.push(k + '=' + (typeof v === 'string' ? v : JSON.stringify(v)));
    }
    return parts.join(' ');
  }

  // find: a job by id in any queue (the search box); it opens the job's page.
  function find(id) {
    const g = gen;
    main().replaceChildren(heading('Find job'), h('p', { class: 'loading' }, 'Looking for ' + id + '…'));
    (async () => {
      try {
        const j = await api('GET', 'jobs/' + enc(id));
        if (live(g)) location.replace(jobHref(j.queue, j.id));
      } catch (e) {
        if (!live(g)) return;
        main().replaceChildren(heading('Find job'), e.status === 404
          ? h('div', { class: 'error-box', role: 'alert' }, 'No queue has a job with id ' + id + '. Finished jobs are kept for the retention time only.')
          : errorBox('Could not look for ' + id, e));
      }
    })();
    return {};
  }

  // ---- Schedules: periodic schedules (GET v1/schedules; POST v1/schedules/N/pause, /resume) ----

  // schedulesPage lists the stored schedules with their last and next runs, the last run's
  // job (linked) and a button that pauses or resumes each.
  function schedulesPage() {
    const g = gen;
    const wrap = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
    const err = h('div', {});
    main().replaceChildren(heading('Schedules'), err,
      h('section', { class: 'card', 'aria-labelledby': 's-h' }, h('h2', { id: 's-h' }, 'Periodic schedules'),
        h('p', { class: 'muted' }, 'Each tick enqueues one job however many workers run. Add one with conveyor schedules create or POST /v1/schedules.'),
        wrap));
    const refresh = async () => {
      try {
        // One page of the most the API gives: past it, the CLI pages through them all.
        const body = await api('GET', 'schedules?limit=1000');
        if (!live(g)) return;
        err.replaceChildren();
        renderSchedules(wrap, (body && body.schedules) || [], refresh);
        if (body && body.next) {
          wrap.append(h('p', { class: 'muted' }, 'The first 1,000 schedules by name; conveyor schedules list shows them all.'));
        }
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not load the schedules', e));
      }
    };
    refresh();
    return { refresh };
  }

  const isoMs = (v) => (v ? Date.parse(v) : 0);

  function renderSchedules(wrap, list, reload) {
    if (list.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted' }, 'No schedules yet.'));
      return;
    }
    const cols = ['Name', 'Spec', 'Queue', 'Type', 'Missed ticks', 'Last run', 'Last job', 'Next run', ''];
    const table = h('table', { class: 'grid-table schedules' },
      h('caption', { class: 'visually-hidden' }, 'Periodic schedules'),
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, list.map((sc) => {
        const act = h('td', { class: 'actions' });
        const btn = h('button', {
          type: 'button', class: 'pause-btn' + (sc.paused ? '' : ' danger'), data: { action: sc.paused ? 'resume' : 'pause' },
          'aria-label': (sc.paused ? 'Resume' : 'Pause') + ' schedule ' + sc.name,
          onclick: async () => {
            btn.disabled = true;
            try {
              await api('POST', 'schedules/' + enc(sc.name) + (sc.paused ? '/resume' : '/pause'));
              notify('ok', (sc.paused ? 'Resumed ' : 'Paused ') + sc.name + '.');
            } catch (e) {
              notify('bad', 'Could not ' + (sc.paused ? 'resume ' : 'pause ') + sc.name + ': ' + e.message);
            }
            await reload();
          },
        }, sc.paused ? 'Resume' : 'Pause');
        act.append(btn);
        return h('tr', { data: { schedule: sc.name, paused: String(sc.paused) } },
          h('th', { scope: 'row', class: 'name', data: { label: 'Name', field: 'name' } }, sc.name, sc.paused ? [' ', pausedBadge()] : null),
          h('td', { data: { label: 'Spec', field: 'spec' } }, h('code', {}, sc.spec)),
          h('td', { data: { label: 'Queue', field: 'queue' } }, h('a', { href: queueHref(sc.queue) }, sc.queue)),
          h('td', { data: { label: 'Type', field: 'type' } }, sc.type),
          h('td', { data: { label: 'Missed ticks', field: 'missed' } }, sc.missed === 'once' ? 'run once' : 'skip'),
          h('td', { data: { label: 'Last run', field: 'last_run_at' } }, timeEl(isoMs(sc.last_run_at), true)),
          h('td', { data: { label: 'Last job', field: 'last_job' } },
            sc.last_job ? h('a', { class: 'id', href: jobHref(sc.queue, sc.last_job) }, sc.last_job) : h('span', { class: 'muted' }, '—')),
          h('td', { data: { label: 'Next run', field: 'next_run_at' } }, timeEl(isoMs(sc.next_run_at), true)),
          act);
      })));
    wrap.replaceChildren(table);
  }

  // ---- Redis: each server's state, each queue's memory and the doctor's findings (GET v1/redis) ----

  function fmtBytes(v) {
    v = num(v);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[i];
  }

  // redisPage loads when it opens and on Refresh, not every few seconds: INFO and MEMORY USAGE
  // on every master are not worth a poll.
  function redisPage() {
    const g = gen;
    const err = h('div', {});
    const nodes = h('div', { class: 'redis-nodes' }, h('p', { class: 'loading' }, 'Loading…'));
    const queues = h('div', { class: 'redis-queues' });
    const findings = h('div', { class: 'redis-doctor' });
    const load = async () => {
      try {
        const r = await api('GET', 'redis');
        if (!live(g)) return;
        err.replaceChildren();
        renderRedisNodes(nodes, r.nodes || []);
        renderQueueMemory(queues, r.queues || [], r.memory_error);
        renderFindings(findings, (r.doctor && r.doctor.findings) || []);
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not read Redis', e));
      }
    };
    main().replaceChildren(heading('Redis', h('button', { type: 'button', onclick: () => load() }, 'Refresh')), err,
      h('section', { class: 'card', 'aria-labelledby': 'rn-h' }, h('h2', { id: 'rn-h' }, 'Servers'), nodes),
      h('section', { class: 'card', 'aria-labelledby': 'rq-h' }, h('h2', { id: 'rq-h' }, 'Memory by queue'),
        h('p', { class: 'muted small' }, 'MEMORY USAGE of each queue\'s streams, scheduled and dead sets (Redis samples 5 elements of each, so a big queue costs what a small one does), and an estimate of its job records: its jobs times the mean size of a few records. Finished records kept for their retention are not counted.'),
        queues),
      h('section', { class: 'card', 'aria-labelledby': 'rd-h' }, h('h2', { id: 'rd-h' }, 'Doctor'),
        h('p', { class: 'muted small' }, 'What conveyor doctor finds: is this Redis set up to keep jobs safe?'), findings),
      keysCard());
    load();
    return {};
  }

  // keysCard: the keys of encryption at rest (GET /v1/keys), their ids only, the sealing one
  // first, and a button that re-seals what Redis stores under it (POST /v1/keys/rotate): one
  // bounded pass a call, called again with the answer's cursor until done, showing the values
  // re-sealed so far, then the report. Leaving the page stops it: every write is a
  // compare-and-set and current values are skipped, so running it again finishes the job.
  function keysCard() {
    const g = gen;
    const body = h('div', { class: 'keys-body' }, h('p', { class: 'loading muted small' }, 'Loading…'));
    api('GET', 'keys').then((k) => { if (live(g)) renderKeys(body, k, g); },
      (e) => { if (live(g)) body.replaceChildren(errorBox('Could not read the keys', e)); });
    return h('section', { class: 'card keys', 'aria-labelledby': 'rk-h' }, h('h2', { id: 'rk-h' }, 'Keys'),
      h('p', { class: 'muted small' }, 'Encryption at rest (conveyor serve --keys): the ids of the server\'s keys in its key file\'s order. The first seals what is published; the others only open what they sealed.'),
      body);
  }

  // ROTATE_MAX is the values a call examines: a second or so of Redis's time, so the progress moves.
  const ROTATE_MAX = 1000;
  const ROTATE_PLACES = ['scheduled', 'queued', 'waiting', 'dead', 'completed', 'canceled', 'workflow_results', 'logs'];
  const ROTATE_COUNTS = [['resealed', 'Re-sealed'], ['sealed', 'Sealed (were plain)'], ['current', 'Current'], ['moved_on', 'Moved on'],
    ['running', 'Running'], ['gone', 'Gone'], ['failed', 'Failed']];

  function renderKeys(body, k, g) {
    const ids = k.keys || [];
    if (ids.length === 0) {
      body.replaceChildren(h('p', {}, 'This server has no keys: payloads, results and log lines are stored as sent.'),
        h('p', {}, h('button', { type: 'button', class: 'rotate', disabled: true }, 'Re-seal')),
        h('p', { class: 'muted small rotate-why' }, 'Re-sealing needs keys: start the server with conveyor serve --keys FILE.'));
      return;
    }
    const sealing = k.sealing || ids[0];
    const status = h('div', { class: 'rotate-status', 'aria-live': 'polite' });
    const actions = h('p', { class: 'rotate-actions' });
    const button = h('button', { type: 'button', class: 'rotate', disabled: !k.can_rotate }, 'Re-seal with key ' + sealing);
    actions.replaceChildren(button);
    const run = async () => {
      if (!await confirmInline(actions, 'Re-seal every payload, result and log line Redis stores under key ' + sealing + '?', 'Re-seal')) return;
      button.disabled = true;
      const sum = {};
      const places = {};
      let cursor = '', calls = 0, r = null;
      const show = (text) => status.replaceChildren(h('p', { class: 'rotate-progress' }, text));
      show('Re-sealing…');
      try {
        do {
          r = await api('POST', 'keys/rotate', cursor ? { max: ROTATE_MAX, cursor } : { max: ROTATE_MAX });
          calls++;
          for (const [c] of ROTATE_COUNTS) sum[c] = (sum[c] || 0) + num(r.total && r.total[c]);
          for (const [p, counts] of Object.entries(r.places || {})) {
            places[p] = places[p] || {};
            for (const [c] of ROTATE_COUNTS) places[p][c] = (places[p][c] || 0) + num(counts[c]);
          }
          cursor = r.cursor || '';
          if (!live(g)) return; // the page is gone: running it again goes on
          show('Re-sealed ' + fmtInt(sum.resealed + sum.sealed) + ' values so far' + (r.done ? '.' : '…'));
        } while (!r.done);
      } catch (e) {
        if (live(g)) status.replaceChildren(errorBox('Re-sealing stopped (run it again to go on)', e),
          h('p', { class: 'rotate-progress' }, 'Re-sealed ' + fmtInt((sum.resealed || 0) + (sum.sealed || 0)) + ' values before it stopped.'));
        button.disabled = !k.can_rotate;
        return;
      }
      const left = sum.moved_on + sum.running;
      status.replaceChildren(
        h('p', { class: 'rotate-done' }, 'Done: ' + fmtInt(sum.resealed + sum.sealed) + ' values now under key ' + sealing + ', ' +
          fmtInt(sum.current) + ' already current' + (calls > 1 ? ' (' + fmtInt(calls) + ' calls).' : '.') +
          (left ? ' ' + fmtInt(left) + ' moved on or running: run it again for them.' : '')),
        sum.failed ? h('p', { class: 'error-text' }, fmtInt(sum.failed) + ' values could not be opened: keep their keys listed until they are re-sealed (conveyor keys rotate names them).') : '',
        h('div', { class: 'table-scroll' }, h('table', { class: 'grid-table rotate-report' },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Place'), ...ROTATE_COUNTS.map(([, label]) => h('th', { scope: 'col', class: 'num' }, label)))),
          h('tbody', {}, ...ROTATE_PLACES.filter((p) => places[p]).map((p) => h('tr', { data: { place: p } }, h('th', { scope: 'row' }, p.replace('_', ' ')),
            ...ROTATE_COUNTS.map(([c, label]) => h('td', { class: 'num', data: { label, field: c } }, fmtInt(places[p][c]))))),
          h('tr', { data: { place: 'total' } }, h('th', { scope: 'row' }, 'total'),
            ...ROTATE_COUNTS.map(([c, label]) => h('td', { class: 'num', data: { label, field: c } }, fmtInt(sum[c]))))))),
        h('p', { class: 'muted small' }, 'The outbox\'s rows are in PostgreSQL: conveyor keys rotate --postgres re-seals them.'));
      button.disabled = !k.can_rotate;
    };
    button.addEventListener('click', run);
    body.replaceChildren(
      h('ul', { class: 'key-list' }, ...ids.map((id) => h('li', { data: { key: id } }, h('code', {}, id), ' ',
        id === sealing ? h('span', { class: 'badge key-sealing' }, 'seals') : h('span', { class: 'muted small' }, 'opens only')))),
      actions,
      k.can_rotate ? '' : h('p', { class: 'muted small rotate-why' }, 'Re-sealing reads every payload in the clear: sign in with the payload token (conveyor serve --payload-token) to run it.'),
      status);
  }

  function renderRedisNodes(wrap, nodes) {
    if (nodes.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted' }, 'No server answered.'));
      return;
    }
    wrap.replaceChildren(...nodes.map((n) => {
      // What the server does not report (an embedded or Redis-compatible server) reads "not
      // reported", not a zero or "undefined".
      const missing = new Set(n.unsupported || []);
      const NOT = 'not reported';
      const from = (section, v) => (missing.has('INFO') || missing.has('INFO ' + section) ? NOT : v);
      const row = (k, label, v, bad) => h('div', { data: { field: k }, class: bad ? 'bad' : null }, h('dt', {}, label), h('dd', {}, v));
      const persist = (n.aof ? 'AOF on (fsync ' + (n.appendfsync || '?') + ')' : 'AOF off') + '; last RDB save ' +
        (n.rdb_last_save ? fmtAgo(n.rdb_last_save * 1000) + ' (' + (n.rdb_last_save_status || '?') + ')' : 'never') +
        ', ' + fmtInt(n.rdb_changes_since_save) + ' writes since';
      return h('div', { class: 'redis-node', data: { node: n.node } },
        h('h3', {}, n.node || 'Redis'),
        n.error ? h('p', { class: 'error' }, n.error) : null,
        missing.size ? h('p', { class: 'muted small', data: { field: 'unsupported' } },
          'This server does not support or report ' + [...missing].join(', ') + ' (an embedded or Redis-compatible server): what those fill is not shown.') : null,
        h('dl', { class: 'counters' },
          row('version', 'Version', from('server', n.version + ' (' + n.mode + ')')),
          row('uptime', 'Up for', from('server', fmtDur(num(n.uptime_seconds) * 1000))),
          row('memory', 'Memory used', from('memory', fmtBytes(n.used_memory) + ' of ' + (num(n.max_memory) ? fmtBytes(n.max_memory) : 'no limit')),
            num(n.max_memory) && num(n.used_memory) > 0.8 * num(n.max_memory)),
          row('eviction', 'Eviction policy', from('memory', n.eviction_policy), n.eviction_policy && n.eviction_policy !== 'noeviction'),
          row('clients', 'Clients', fmtInt(n.connected_clients) + (num(n.max_clients) ? ' of ' + fmtInt(n.max_clients) : '')),
          row('persistence', 'Persistence', from('persistence', persist), !n.aof && n.rdb_last_save_status === 'err')));
    }));
  }

  function renderQueueMemory(wrap, queues, memoryError) {
    if (queues.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted' }, 'No queues yet.'));
      return;
    }
    if (memoryError) {
      // The server did not measure memory: the jobs of each queue, and why there are no bytes.
      wrap.replaceChildren(h('p', { class: 'error', data: { field: 'memory_error' } }, memoryError + '.'),
        h('table', { class: 'grid-table queue-memory' },
          h('caption', { class: 'visually-hidden' }, 'Jobs of each queue'),
          h('thead', {}, h('tr', {}, ['Queue', 'Jobs'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, queues.map((m) => h('tr', { data: { queue: m.queue } },
            h('th', { scope: 'row', class: 'name' }, h('a', { href: queueHref(m.queue) }, m.queue)),
            h('td', { class: 'num', data: { label: 'Jobs', field: 'jobs' } }, fmtInt(m.jobs)))))));
      return;
    }
    queues = queues.slice().sort((a, b) => num(b.bytes) - num(a.bytes));
    wrap.replaceChildren(h('table', { class: 'grid-table queue-memory' },
      h('caption', { class: 'visually-hidden' }, 'Memory of each queue'),
      h('thead', {}, h('tr', {}, ['Queue', 'Total', 'Keys', 'Job records (estimate)', 'Jobs'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, queues.map((m) => h('tr', { data: { queue: m.queue } },
        h('th', { scope: 'row', class: 'name' }, h('a', { href: queueHref(m.queue) }, m.queue)),
        h('td', { class: 'num', data: { label: 'Total', field: 'bytes' } }, fmtBytes(m.bytes)),
        h('td', { class: 'num', data: { label: 'Keys', field: 'keys' } }, fmtBytes(m.keys)),
        h('td', { class: 'num', data: { label: 'Job records', field: 'records' } }, fmtBytes(m.records),
          h('span', { class: 'muted small' }, ' (' + fmtInt(m.sampled) + ' sampled)')),
        h('td', { class: 'num', data: { label: 'Jobs', field: 'jobs' } }, fmtInt(m.jobs)))))));
  }

  function renderFindings(wrap, findings) {
    wrap.replaceChildren(h('table', { class: 'grid-table findings' },
      h('caption', { class: 'visually-hidden' }, 'The doctor\'s findings'),
      h('thead', {}, h('tr', {}, ['Check', 'Server', 'Status', 'Found', 'Fix'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, findings.map((f) => h('tr', { data: { check: f.check, status: f.status } },
        h('td', { data: { label: 'Check' } }, f.check),
        h('td', { data: { label: 'Server' } }, f.node || '—'),
        h('td', { data: { label: 'Status' } }, h('span', { class: 'badge doctor-' + f.status }, f.status)),
        h('td', { class: 'wrap', data: { label: 'Found' } }, f.detail),
        h('td', { class: 'wrap', data: { label: 'Fix' } }, f.fix || '—'))))));
  }

  // ---- Workers: the live workers from their heartbeat records (GET v1/workers) ----

  // workersPage lists every live worker (name, host, pid, version, queues, concurrency, started,
  // last heartbeat) and the jobs each runs, linked to their pages.
  function workersPage() {
    const g = gen;
    const wrap = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
    const err = h('div', {});
    main().replaceChildren(heading('Workers'), err,
      h('section', { class: 'card', 'aria-labelledby': 'w-h' }, h('h2', { id: 'w-h' }, 'Live workers'),
        h('p', { class: 'muted' }, 'Each running worker writes a heartbeat every few seconds; one that misses three drops out, one that stops leaves at once. Also conveyor workers and GET /v1/workers.'),
        wrap));
    const refresh = async () => {
      try {
        const body = await api('GET', 'workers');
        if (!live(g)) return;
        err.replaceChildren();
        renderWorkers(wrap, (body && body.workers) || []);
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not load the workers', e));
      }
    };
    refresh();
    return { refresh };
  }

  function renderWorkers(wrap, list) {
    if (list.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted' }, 'No live workers. Start one with conveyor worker.'));
      return;
    }
    const cols = ['Name', 'Host', 'PID', 'Version', 'Queues', 'Running', 'Started', 'Last heartbeat', 'Running jobs'];
    const table = h('table', { class: 'grid-table workers' },
      h('caption', { class: 'visually-hidden' }, 'Live workers'),
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, list.map((wk) => {
        const running = (wk.running || []);
        const count = running.length + num(wk.running_more);
        const jobs = running.length === 0 ? h('span', { class: 'muted' }, 'none') :
          h('ul', { class: 'running-jobs' }, running.map((r) => h('li', { data: { job: r.id } },
            h('a', { class: 'id', href: jobHref(r.queue, r.id) }, r.id), ' ',
            h('span', { class: 'muted' }, r.type + ' on ' + r.queue + ', '), timeEl(r.started_at, true))),
          num(wk.running_more) > 0 ? h('li', { class: 'muted' }, 'and ' + fmtInt(wk.running_more) + ' more') : null);
        return h('tr', { data: { worker: wk.name } },
          h('th', { scope: 'row', class: 'name', data: { label: 'Name', field: 'name' } }, wk.name),
          h('td', { data: { label: 'Host', field: 'host' } }, wk.host),
          h('td', { class: 'num', data: { label: 'PID', field: 'pid' } }, String(wk.pid)),
          h('td', { data: { label: 'Version', field: 'version' } }, h('code', {}, wk.version)),
          h('td', { data: { label: 'Queues', field: 'queues' } },
            (wk.queues || []).map((q, k) => [k ? ', ' : '', h('a', { href: queueHref(q) }, q)])),
          h('td', { class: 'num', data: { label: 'Running', field: 'running' } }, fmtInt(count) + ' / ' + fmtInt(wk.concurrency)),
          h('td', { data: { label: 'Started', field: 'started_at' } }, timeEl(wk.started_at, true)),
          h('td', { data: { label: 'Last heartbeat', field: 'heartbeat' } },
            h('span', { title: 'by Redis\'s clock; a beat every ' + fmtDur(wk.heartbeat_interval_ms) }, fmtDur(wk.heartbeat_age_ms) + ' ago')),
          h('td', { data: { label: 'Running jobs', field: 'jobs' } }, jobs));
      })));
    wrap.replaceChildren(table);
  }

  // ---- Workflows: a queue's workflows and batches (GET v1/queues/Q/workflows, .../workflows/ID) ----

  const WF_LIST_LIMIT = 100;
  const DAG_COLLAPSE = 30; // a layer of more tasks than this is drawn as one box of counts
  // Past this many boxes, every layer of several tasks is one box, and past this many layers
  // only the first DAG_MAX_LAYERS are drawn: a chain of thousands is read in the table.
  const DAG_MAX_NODES = 150;
  const DAG_MAX_LAYERS = 40;
  const TASKS_SHOWN = 100; // task rows shown before "Show all"
  const AFTER_SHOWN = 5; // dependency names shown in a task row before "and N more"
  const wfHref = (q, id) => queueHref(q, 'workflows') + (id ? '/' + enc(id) : '');
  // A workflow's status, in the colors of the job statuses: running as a job in progress.
  const WF_COLOR = { running: 'in_progress', completed: 'completed', failed: 'failed', canceled: 'canceled' };
  const wfBadge = (st) => h('span', { class: 'badge wf-status st-' + (WF_COLOR[st] || 'canceled'), data: { wfStatus: st } }, st);
  const wfFinal = (w) => num(w.completed) + num(w.failed) + num(w.canceled) + num(w.purged);
  // The order the per-status counts of a collapsed layer are listed in: a task purged from the
  // dead set last.
  const TASK_STATES = STATUSES.all.map((s) => s.status).concat(['purged']);

  // wfCounts is a workflow's outcome counts in words: "3 completed, 1 dead".
  function wfCounts(w) {
    const parts = [['completed', 'completed'], ['failed', 'dead'], ['canceled', 'canceled'], ['purged', 'purged']]
      .filter(([k]) => num(w[k]) > 0).map(([k, word]) => fmtInt(w[k]) + ' ' + word);
    return parts.length ? parts.join(', ') : 'none final yet';
  }

  // wfBar is a workflow's progress as a stacked bar: completed, dead, canceled and purged tasks
  // out of all.
  function wfBar(w) {
    const total = Math.max(1, num(w.total));
    const W = 1000, H = 12;
    const svg = s('svg', { class: 'wf-bar', viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', role: 'img',
      'aria-label': fmtInt(wfFinal(w)) + ' of ' + fmtInt(w.total) + ' tasks final: ' + wfCounts(w) },
    s('rect', { class: 'wf-bar-bg', x: 0, y: 0, width: W, height: H }));
    let x = 0;
    for (const k of ['completed', 'failed', 'canceled', 'purged']) {
      const wd = (num(w[k]) / total) * W;
      if (wd > 0) svg.append(s('rect', { class: 'wf-seg st-' + k, x: x.toFixed(2), y: 0, width: wd.toFixed(2), height: H, data: { seg: k } }));
      x += wd;
    }
    return svg;
  }

  // workflowList: a queue's workflows and batches, newest first. It refreshes in place; when
  // newer workflows appear it offers them instead of moving the rows under the pointer.
  function workflowList(q) {
    const g = gen;
    const body = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
    const err = h('div', {});
    const newer = h('span', { class: 'wf-newer' });
    main().replaceChildren(heading('Queue ' + q), tabs(q, 'workflows', null),
      h('section', { class: 'card', 'aria-labelledby': 'wl-h' },
        h('div', { class: 'list-head' }, h('h2', { id: 'wl-h' }, 'Workflows and batches'), newer),
        h('p', { class: 'muted small' }, 'The newest ' + WF_LIST_LIMIT + ', newest first. Publish one with pipeline.Client.Workflow or Client.Batch.'),
        err, body));
    let shown = null; // the ids shown, in order
    const draw = (list) => {
      shown = list.map((w) => w.id).join('\n');
      newer.replaceChildren();
      renderWorkflows(body, q, list);
    };
    const refresh = async () => {
      try {
        const [list, st] = await Promise.all([api('GET', 'queues/' + enc(q) + '/workflows?limit=' + WF_LIST_LIMIT), queueStats(q)]);
        if (!live(g)) return;
        err.replaceChildren();
        updateTabCounts(st);
        const ws = (list && list.workflows) || [];
        if (shown === null || shown === ws.map((w) => w.id).join('\n')) {
          draw(ws);
        } else {
          const known = new Set(shown.split('\n'));
          const n = ws.filter((w) => !known.has(w.id)).length;
          newer.replaceChildren(h('button', { type: 'button', class: 'wf-show-newer', onclick: () => draw(ws) },
            n > 0 ? 'Show ' + fmtInt(n) + ' newer' : 'Show the latest'));
        }
        stamp();
      } catch (e) {
        if (live(g)) err.replaceChildren(errorBox('Could not load the workflows', e));
      }
    };
    refresh();
    return { refresh };
  }

  function renderWorkflows(wrap, q, list) {
    if (list.length === 0) {
      wrap.replaceChildren(h('p', { class: 'muted empty' }, 'No workflows or batches in ' + q + '.'));
      return;
    }
    const cols = ['Workflow', 'Kind', 'Status', 'Progress', 'Dead', 'Canceled', 'Created'];
    wrap.replaceChildren(h('table', { class: 'grid-table workflows' },
      h('caption', { class: 'visually-hidden' }, 'Workflows and batches of ' + q + ', newest first'),
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col', class: ['Dead', 'Canceled'].includes(c) ? 'num' : null }, c)))),
      h('tbody', {}, list.map((w) => h('tr', { data: { workflow: w.id, status: w.status } },
        h('th', { scope: 'row', class: 'name', data: { label: 'Workflow' } },
          h('a', { href: wfHref(q, w.id) }, w.name || w.id),
          w.name ? h('div', { class: 'id muted small' }, w.id) : null),
        h('td', { data: { label: 'Kind', field: 'kind' } }, w.kind),
        h('td', { data: { label: 'Status', field: 'status' } }, wfBadge(w.status)),
        h('td', { data: { label: 'Progress', field: 'progress' } },
          h('span', { class: 'wf-progress' },
            h('progress', { max: String(Math.max(1, num(w.total))), value: String(num(w.completed)), 'aria-label': 'Completed tasks of ' + (w.name || w.id) }),
            ' ', h('span', { class: 'wf-frac' }, fmtInt(w.completed) + '/' + fmtInt(w.total)))),
        h('td', { class: 'num' + (num(w.failed) > 0 ? ' has-dead' : ''), data: { label: 'Dead', field: 'failed' } }, fmtInt(w.failed)),
        h('td', { class: 'num', data: { label: 'Canceled', field: 'canceled' } }, fmtInt(w.canceled)),
        h('td', { data: { label: 'Created', field: 'created_at' } }, timeEl(w.created_at, true)))))));
  }

  // workflowPage: one workflow or batch: its status and counts, a drawing of its tasks and
  // their dependencies, and its tasks. It polls like the job page until the workflow is
  // completed or canceled (a failed one may resume: a replay of its dead task).
  function workflowPage(q, id) {
    const g = gen;
    const head = h('div', { class: 'wf-head' }, h('p', { class: 'loading' }, 'Loading…'));
    const dag = h('div', { class: 'dag-wrap' });
    const tasksBox = h('div', { class: 'wf-tasks' });
    const err = h('div', {});
    const graphCard = h('section', { class: 'card dag-card', 'aria-labelledby': 'wg-h' }, h('h2', { id: 'wg-h' }, 'Graph'), dag);
    const tasksCard = h('section', { class: 'card', 'aria-labelledby': 'wt-h' }, h('h2', { id: 'wt-h' }, 'Tasks'), tasksBox);
    main().replaceChildren(
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' },
        h('a', { href: '#/queues' }, 'Queues'), ' › ', h('a', { href: queueHref(q) }, q), ' › ',
        h('a', { href: wfHref(q) }, 'Workflows'), ' › ', h('span', { class: 'id' }, id)),
      heading('Workflow ' + id), err, head, graphCard, tasksCard);
    let done = false;
    let last = ''; // the answer last drawn: an unchanged one is not drawn again
    let showAll = false;
    let cur = null;
    const draw = () => {
      const w = cur;
      head.replaceChildren(...wfHeader(w));
      dag.replaceChildren(dagDrawing(q, w.tasks || []));
      tasksBox.replaceChildren(...taskTable(q, w, showAll, () => { showAll = true; draw(); }));
    };
    const refresh = async () => {
      if (done) return;
      try {
        const w = await api('GET', 'queues/' + enc(q) + '/workflows/' + enc(id));
        if (!live(g)) return;
        err.replaceChildren();
        done = w.status === 'completed' || w.status === 'canceled';
        const text = JSON.stringify(w);
        if (text !== last) {
          last = text;
          cur = w;
          draw();
        }
        stamp();
      } catch (e) {
        if (!live(g)) return;
        if (e.status === 404) {
          done = true;
          head.replaceChildren(h('div', { class: 'error-box', role: 'alert' },
            'No workflow ' + id + ' in queue ' + q + '. A finished workflow is kept for the retention time only.'));
          graphCard.hidden = tasksCard.hidden = true;
        } else {
          err.replaceChildren(errorBox('Could not load the workflow', e));
        }
      }
    };
    refresh();
    return { refresh };
  }

  function wfHeader(w) {
    const total = num(w.total), fin = wfFinal(w);
    const field = (k, name, v) => h('div', { data: { field: k } }, h('dt', {}, name), h('dd', {}, v));
    return [
      h('div', { class: 'job-status' }, w.kind === 'batch' ? 'Batch ' : 'Workflow ', wfBadge(w.status),
        w.name ? h('span', { class: 'wf-name' }, w.name) : null),
      h('div', { class: 'wf-progress-box' }, wfBar(w),
        h('p', { class: 'wf-bar-text', data: { final: String(fin), total: String(total) } },
          h('strong', {}, fmtInt(fin) + ' of ' + fmtInt(total)), ' tasks final: ' + wfCounts(w) + '.')),
      h('dl', { class: 'counters wf-counts' },
        field('total', 'Tasks', fmtInt(total)),
        field('completed', 'Completed', fmtInt(w.completed)),
        field('failed', 'Dead', fmtInt(w.failed)),
        field('canceled', 'Canceled', fmtInt(w.canceled)),
        num(w.purged) > 0 ? field('purged', 'Purged', fmtInt(w.purged)) : null,
        field('left', 'To finish', fmtInt(total - fin))),
      h('dl', { class: 'fields wf-times' },
        field('queue', 'Queue', h('a', { href: queueHref(w.queue) }, w.queue)),
        field('kind', 'Kind', w.kind),
        field('created_at', 'Created', timeEl(w.created_at)),
        field('finished_at', 'Finished', timeEl(w.finished_at))),
    ];
  }

  // dagLayout places the tasks in layers (a task's layer is one more than its dependencies'
  // deepest) and each layer in a column. A layer of more than DAG_COLLAPSE tasks becomes one
  // group node: a fan-out of a thousand is read as counts, not drawn. Too many boxes still, and
  // every layer of several tasks is one; too many layers, and the first DAG_MAX_LAYERS show.
  function dagLayout(tasks) {
    const at = new Map(tasks.map((t, i) => [t.name, i]));
    const layer = tasks.map(() => 0);
    // Tasks come in a topological order, so one pass settles; more guard against one that
    // is not.
    for (let pass = 0, moved = true; moved && pass < tasks.length; pass++) {
      moved = false;
      tasks.forEach((t, i) => {
        for (const a of t.after || []) {
          const d = at.get(a);
          if (d !== undefined && layer[d] + 1 > layer[i]) { layer[i] = layer[d] + 1; moved = true; }
        }
      });
    }
    const byLayer = [];
    tasks.forEach((t, i) => { (byLayer[layer[i]] = byLayer[layer[i]] || []).push(i); });
    const boxes = (at) => byLayer.reduce((a, m) => a + (m.length > at ? 1 : m.length), 0);
    const collapseAt = boxes(DAG_COLLAPSE) > DAG_MAX_NODES ? 1 : DAG_COLLAPSE;
    const shown = boxes(collapseAt) > DAG_MAX_NODES ? Math.min(byLayer.length, DAG_MAX_LAYERS) : byLayer.length;
    const nodes = [];
    const nodeOf = tasks.map(() => -1);
    const columns = byLayer.slice(0, shown).map((members, l) => {
      members = members || [];
      if (members.length > collapseAt) {
        const counts = {};
        for (const i of members) counts[tasks[i].status] = (counts[tasks[i].status] || 0) + 1;
        const n = nodes.push({ group: true, layer: l, tasks: members, counts }) - 1;
        for (const i of members) nodeOf[i] = n;
        return [n];
      }
      return members.map((i) => { nodeOf[i] = nodes.push({ task: tasks[i], layer: l }) - 1; return nodeOf[i]; });
    });
    const seen = new Set();
    const edges = [];
    const preds = nodes.map(() => []);
    tasks.forEach((t, i) => {
      for (const a of t.after || []) {
        const d = at.get(a);
        if (d === undefined) continue;
        const from = nodeOf[d], to = nodeOf[i], key = from + '>' + to;
        if (from < 0 || to < 0 || from === to || seen.has(key)) continue;
        seen.add(key);
        edges.push({ from, to });
        preds[to].push(from);
      }
    });
    // Fewer crossings: each column in the mean order of its nodes' dependencies (barycenters).
    const pos = nodes.map(() => 0);
    columns.forEach((col) => col.forEach((n, k) => { pos[n] = k; }));
    for (let l = 1; l < columns.length; l++) {
      const bary = (n) => (preds[n].length ? preds[n].reduce((a, p) => a + pos[p], 0) / preds[n].length : pos[n]);
      const keyed = columns[l].map((n, k) => [bary(n), k, n]);
      keyed.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      columns[l] = keyed.map((x) => x[2]);
      columns[l].forEach((n, k) => { pos[n] = k; });
    }
    const hidden = byLayer.slice(shown).reduce((a, m) => a + m.length, 0);
    return { nodes, edges, columns, layers: byLayer.length, hidden };
  }

  // dagDrawing draws the workflow's tasks as an SVG: boxes in columns by layer, colored by
  // status and linked to their jobs, and an arrow from each dependency to the task that
  // waits for it.
  function dagDrawing(q, tasks) {
    if (tasks.length === 0) return h('p', { class: 'muted' }, 'No tasks.');
    const NW = 168, NH = 42, GAP_X = 64, GAP_Y = 14, PAD = 12, LINE = 16;
    const { nodes, edges, columns, layers, hidden } = dagLayout(tasks);
    const height = (n) => (nodes[n].group ? 30 + LINE * Object.keys(nodes[n].counts).length : NH);
    const colH = columns.map((col) => col.reduce((a, n) => a + height(n), 0) + GAP_Y * Math.max(0, col.length - 1));
    const maxH = Math.max(...colH);
    const W = PAD * 2 + columns.length * NW + (columns.length - 1) * GAP_X;
    const H = PAD * 2 + maxH;
    const box = nodes.map(() => null);
    columns.forEach((col, l) => {
      let y = PAD + (maxH - colH[l]) / 2;
      for (const n of col) {
        box[n] = { x: PAD + l * (NW + GAP_X), y, h: height(n) };
        y += height(n) + GAP_Y;
      }
    });
    const cut = (text, n) => (text.length > n ? text.slice(0, n - 1) + '…' : text);
    const svg = s('svg', { class: 'dag', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'group',
      'aria-label': 'Graph of ' + fmtInt(tasks.length) + ' tasks in ' + fmtInt(columns.length) + ' layers' },
    s('defs', {}, s('marker', { id: 'dag-arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' },
      s('path', { class: 'dag-arrow', d: 'M0 0 L10 5 L0 10 z' }))));
    const eg = s('g', { class: 'edges' });
    for (const e of edges) {
      const a = box[e.from], b = box[e.to];
      const x1 = a.x + NW, y1 = a.y + a.h / 2, x2 = b.x - 2, y2 = b.y + b.h / 2, mx = (x1 + x2) / 2;
      const src = nodes[e.from];
      const name = (n) => (nodes[n].group ? 'layer ' + (nodes[n].layer + 1) : nodes[n].task.name);
      eg.append(s('path', { class: 'edge' + (!src.group && src.task.status === 'completed' ? ' edge-done' : ''),
        d: 'M' + x1 + ' ' + y1 + ' C' + mx + ' ' + y1 + ' ' + mx + ' ' + y2 + ' ' + x2 + ' ' + y2,
        'marker-end': 'url(#dag-arrow)', data: { from: name(e.from), to: name(e.to) } }));
    }
    const ng = s('g', { class: 'nodes' });
    nodes.forEach((n, k) => {
      const { x, y, h: bh } = box[k];
      if (n.group) {
        const states = Object.keys(n.counts).sort((p, r) => TASK_STATES.indexOf(p) - TASK_STATES.indexOf(r));
        ng.append(s('g', { class: 'node group', data: { layer: String(n.layer + 1), count: String(n.tasks.length) } },
          s('title', {}, fmtInt(n.tasks.length) + ' tasks in layer ' + (n.layer + 1) + '; each is in the table below'),
          s('rect', { x, y, width: NW, height: bh, rx: 8, ry: 8 }),
          s('text', { class: 'node-name', x: x + 10, y: y + 18 }, fmtInt(n.tasks.length) + ' tasks'),
          states.map((st, i) => s('text', { class: 'node-count st-' + st, x: x + 10, y: y + 18 + LINE * (i + 1), data: { status: st } },
            fmtInt(n.counts[st]) + ' ' + statusWord(st)))));
        return;
      }
      const t = n.task;
      ng.append(s('a', { class: 'node st-' + t.status + (t.finally ? ' finally' : ''), href: jobHref(q, t.job_id),
        'aria-label': 'Task ' + t.name + ': ' + statusWord(t.status), data: { task: t.name, status: t.status } },
      s('title', {}, t.name + ' (' + statusWord(t.status) + ')' + (t.type ? ', type ' + t.type : '') + (t.finally ? ', runs finally' : '')),
      s('rect', { x, y, width: NW, height: bh, rx: 8, ry: 8 }),
      s('text', { class: 'node-name', x: x + 10, y: y + 17 }, cut(t.name, 20)),
      s('text', { class: 'node-status', x: x + 10, y: y + 33 }, statusWord(t.status) + (t.finally ? ' · finally' : ''))));
    });
    svg.append(eg, ng);
    if (hidden === 0) return svg;
    return h('div', {}, h('p', { class: 'muted small dag-cut', data: { layers: String(layers), hidden: String(hidden) } },
      'The first ' + fmtInt(columns.length) + ' of ' + fmtInt(layers) + ' layers; the ' + fmtInt(hidden) +
      ' tasks of the others are in the table below.'), svg);
  }

  // taskTable lists the workflow's tasks in its order, the first TASKS_SHOWN unless all.
  function taskTable(q, w, all, showAll) {
    const tasks = w.tasks || [];
    const rows = all ? tasks : tasks.slice(0, TASKS_SHOWN);
    const after = (names) => {
      if (!names || names.length === 0) return h('span', { class: 'muted' }, '—');
      const shown = names.slice(0, AFTER_SHOWN).join(', ');
      return names.length > AFTER_SHOWN
        ? h('span', { title: names.slice(0, 200).join(', ') }, shown + ' and ' + fmtInt(names.length - AFTER_SHOWN) + ' more')
        : shown;
    };
    const cols = ['Task', 'Type', 'Status', 'After', 'Attempt', 'Started', 'Finished', 'Last error'];
    return [
      h('table', { class: 'grid-table wf-task-table' },
        h('caption', { class: 'visually-hidden' }, 'Tasks of ' + w.id + ', in the order they can run'),
        h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col', class: c === 'Attempt' ? 'num' : null }, c)))),
        h('tbody', {}, rows.map((t) => h('tr', { data: { task: t.name, status: t.status } },
          h('td', { class: 'id', data: { label: 'Task' } }, h('a', { href: jobHref(q, t.job_id) }, t.name)),
          h('td', { data: { label: 'Type' } }, t.type || '—'),
          h('td', { data: { label: 'Status', field: 'status' } }, badge(t.status || 'unknown'), t.finally ? h('span', { class: 'muted small' }, ' finally') : null),
          h('td', { class: 'wrap', data: { label: 'After', field: 'after' } }, after(t.after)),
          h('td', { class: 'num', data: { label: 'Attempt' } }, fmtInt(t.attempt)),
          h('td', { data: { label: 'Started' } }, timeEl(t.started_at, true)),
          h('td', { data: { label: 'Finished' } }, timeEl(t.finished_at, true)),
          h('td', { class: 'reason', data: { label: 'Last error', field: 'last_error' } }, fold(t.last_error)))))),
      rows.length < tasks.length
        ? h('p', { class: 'wf-more' }, 'The first ' + fmtInt(rows.length) + ' of ' + fmtInt(tasks.length) + ' tasks. ',
          h('button', { type: 'button', class: 'wf-show-all', onclick: showAll }, 'Show all ' + fmtInt(tasks.length)))
        : '',
    ];
  }

  function notFound() {
    main().replaceChildren(heading('Not found'), h('p', {}, 'This page does not exist. ', h('a', { href: '#/queues' }, 'See the queues.')));
    return {};
  }

  // ---- Routing: #/queues, #/queues/Q, #/queues/Q/<state>, #/jobs/Q/ID, #/jobs/ID, #/dead,
  // #/retries, #/scheduled, #/schedules ----

  function parts() {
    try {
      return location.hash.replace(/^#\/?/, '').split('/').filter((p) => p !== '').map(decodeURIComponent);
    } catch (_) {
      return null;
    }
  }

  function route() {
    if (view && view.leave) view.leave();
    gen++;
    const p = parts();
    const states = new Set(STATES.map(([st]) => st));
    let v;
    if (p === null) v = notFound();
    else if (p.length === 0 || (p.length === 1 && p[0] === 'queues')) v = overview();
    else if (p[0] === 'queues' && p.length === 2) v = queuePage(p[1]);
    else if (p[0] === 'queues' && p.length === 3 && states.has(BY_WORD.get(p[2]) || p[2])) v = jobList(p[1], BY_WORD.get(p[2]) || p[2]);
    else if (p[0] === 'queues' && p.length === 3 && p[2] === 'workflows') v = workflowList(p[1]);
    else if (p[0] === 'queues' && p.length === 4 && p[2] === 'workflows') v = workflowPage(p[1], p[3]);
    else if (p[0] === 'jobs' && p.length === 3) v = jobPage(p[1], p[2]);
    else if (p[0] === 'jobs' && p.length === 2) v = find(p[1]);
    else if (p.length === 1 && Object.hasOwn(GLOBAL, p[0])) v = globalList(p[0]);
    else if (p[0] === 'schedules' && p.length === 1) v = schedulesPage();
    else if (p[0] === 'redis' && p.length === 1) v = redisPage();
    else if (p[0] === 'workers' && p.length === 1) v = workersPage();
    else v = notFound();
    view = v;
    $('#nav-queues').setAttribute('aria-current', p && (p.length === 0 || p[0] === 'queues') ? 'page' : 'false');
    $('#nav-schedules').setAttribute('aria-current', p && p[0] === 'schedules' ? 'page' : 'false');
    for (const k of Object.keys(GLOBAL)) {
      const a = $('#nav-' + k);
      if (a) a.setAttribute('aria-current', p && p.length === 1 && p[0] === k ? 'page' : 'false');
    }
    const navRedis = $('#nav-redis');
    if (navRedis) navRedis.setAttribute('aria-current', p && p[0] === 'redis' ? 'page' : 'false');
    $('#nav-workers').setAttribute('aria-current', p && p[0] === 'workers' ? 'page' : 'false');
  }

  function navigated() {
    $('#notice').hidden = true;
    route();
    const m = main();
    if (document.activeElement !== $('#search-id')) m.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }

  let ticking = false;
  async function tick() {
    if (ticking || tokenPrompt || document.hidden) return;
    ticking = true;
    try {
      if (view && view.refresh) await view.refresh();
      // The navigation's counts, on a page that read no queue stats this tick.
      if (Date.now() - navAt >= REFRESH_MS) await allQueues().catch(() => { /* the counts stay as they were */ });
    } finally { ticking = false; }
  }

  function start() {
    $('#search').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const id = $('#search-id').value.trim();
      if (!id) return;
      const target = '#/jobs/' + enc(id);
      if (location.hash === target) route(); else location.hash = target;
    });
    const forget = $('#forget-token');
    forget.hidden = !token;
    forget.addEventListener('click', () => {
      token = '';
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ }
      forget.hidden = true;
      notify('ok', 'The token is forgotten; the next request asks for one if the API needs it.');
      route();
    });
    window.addEventListener('hashchange', navigated);
    let resizeTimer = 0;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { if (view && view.resize) view.resize(); }, 150);
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });
    setInterval(tick, REFRESH_MS);
    // Countdowns move every second, without a request.
    setInterval(() => {
      for (const el of document.querySelectorAll('.countdown[data-until]')) el.textContent = countdownText(num(el.dataset.until));
    }, 1000);
    route();
    allQueues().catch(() => { /* the first tick tries again */ });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
