// cdp-throttle's own page: polls /status on its own origin, asking only for
// what changed since the version it last read, and draws each bucket's
// navigations. No library, no build step; everything the relay sends is
// put in as text, never as markup.
(() => {
  'use strict';

  const POLL_MS = 1000;         // how often it asks, while the tab is visible
  const KEEP_S = 300;           // the longest window: older navigations are dropped
  const ROWS = 10;              // buckets shown before "show all"
  const ANSWER_BOUND_MS = 60000; // after this, a navigation without an answer gets none (dashboard.AnswerBound)
  const WINDOWS = [30, 60, 120, 300];

  const params = new URLSearchParams(location.search);
  const token = params.get('token');
  const tokenQuery = token === null ? '' : 'token=' + encodeURIComponent(token);
  const withToken = (path, query) => {
    const q = [query, tokenQuery].filter(Boolean).join('&');
    return q ? path + '?' + q : path;
  };

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  const state = {
    since: 0,
    data: null,
    buckets: new Map(), // name → {info, marks: Map(seq → navigation)}
    rows: new Map(),    // name → row elements
    windowS: WINDOWS.includes(+params.get('window')) ? +params.get('window') : 120,
    showAll: false,
    timer: 0,
  };

  for (const a of document.querySelectorAll('#links a')) a.href = withToken(a.dataset.path, '');
  $('where').textContent = location.host;

  for (const b of document.querySelectorAll('.window button')) {
    b.addEventListener('click', () => {
      state.windowS = +b.dataset.window;
      render();
    });
  }
  $('moreBtn').addEventListener('click', () => {
    state.showAll = !state.showAll;
    render();
  });
  let resizing = 0;
  addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(render, 100);
  });
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) poll();
  });

  function setLive(cls, text) {
    const live = $('live');
    live.className = cls;
    live.textContent = text;
  }

  function note(text) {
    const n = $('note');
    n.textContent = text;
    n.hidden = !text;
  }

  function schedule(ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(poll, ms);
  }

  async function poll() {
    clearTimeout(state.timer);
    if (document.hidden) {
      setLive('paused', 'paused while the tab is hidden');
      return;
    }
    const sent = state.since;
    let res, data;
    try {
      res = await fetch(withToken('/status', 'since=' + sent), { cache: 'no-store', credentials: 'same-origin' });
      if (res.ok) data = await res.json();
    } catch (e) {
      setLive('down', 'relay unreachable: retrying');
      schedule(3 * POLL_MS);
      return;
    }
    if (res.status === 401) {
      note('This relay wants its token: open this page as ' + location.origin + '/?token=TOKEN (query-escaped).');
      setLive('down', 'token required');
      schedule(5 * POLL_MS);
      return;
    }
    if (!data) {
      setLive('down', 'the relay answered ' + res.status + ': retrying');
      schedule(3 * POLL_MS);
      return;
    }
    note(data.mode === 'off' ? 'The limiter is off (--http-nav-delay 0): navigations are relayed, never spaced.' : '');
    if (data.version < sent) state.buckets.clear(); // the relay restarted: this answer holds everything
    merge(data);
    state.since = data.version;
    state.data = data;
    render();
    setLive('ok', 'live');
    schedule(POLL_MS);
  }

  function merge(data) {
    const seen = new Set();
    const cutoff = data.now - KEEP_S * 1000;
    for (const b of data.buckets) {
      seen.add(b.bucket);
      let e = state.buckets.get(b.bucket);
      if (!e) {
        e = { marks: new Map() };
        state.buckets.set(b.bucket, e);
      }
      e.info = b;
      for (const m of b.navigations) e.marks.set(m.seq, m); // an answer replaces the pending one in place
      for (const [seq, m] of e.marks) {
        if (m.at >= cutoff) break;
        e.marks.delete(seq);
      }
    }
    for (const name of [...state.buckets.keys()]) {
      if (!seen.has(name)) state.buckets.delete(name);
    }
  }

  // Formatting.
  const fmtMs = (v) => {
    if (v === undefined || v === null) return '–';
    if (v < 1000) return (v < 10 && v % 1 ? v.toFixed(1) : Math.round(v)) + ' ms';
    return (v / 1000).toFixed(v < 10000 ? 2 : 1) + ' s';
  };
  const fmtN = (n) => (n === undefined ? '–' : n.toLocaleString('en'));
  const clock = (ms) => {
    const d = new Date(ms);
    return d.toLocaleTimeString('en-GB', { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  };
  const clockS = (ms) => new Date(ms).toLocaleTimeString('en-GB', { hour12: false });
  // The charts' vertical scale is logarithmic, from 10 ms at the bottom
  // (shorter waits, and none, sit on it) to the decade above everything
  // shown: the rule's steps of 20 ms read as well as a 30 s Retry-After.
  const LOW_MS = 10;
  const decadeAbove = (v) => {
    let d = 1000;
    while (d < v) d *= 10;
    return d;
  };
  const answerText = (m, now) => {
    switch (m.answer) {
      case 'ok': return (m.status || '') + ' ok';
      case 'overload': return m.status + ' overload';
      case 'failure': return m.status ? m.status + ' failure' : 'no answer (failure)';
    }
    if (m.at > now) return 'waiting for its slot';
    return now - m.at > ANSWER_BOUND_MS ? 'no answer seen' : 'no answer yet';
  };

  function counts(box, items) {
    box.replaceChildren(...items.map(([label, n, alarm, title]) => {
      const s = el('span', alarm ? 'alarm' : '', label + ' ');
      s.append(el('b', '', fmtN(n)));
      if (title) s.title = title;
      return s;
    }));
  }

  function render() {
    const d = state.data;
    if (!d) return;
    for (const b of document.querySelectorAll('.window button')) b.classList.toggle('on', +b.dataset.window === state.windowS);
    $('where').textContent = location.host + (d.mode ? ' · ' + d.mode : '');
    $('title').textContent = 'Busiest ' + ({site: 'sites', ip: 'server addresses'}[d.buckets_by] || 'hosts');

    $('browsers').replaceChildren(...(d.browsers.length ? d.browsers.map((b) => {
      const li = el('li', b.alive ? 'dot-up' : 'dot-down');
      li.title = (b.browser ? b.browser + ' at ' : '') + b.upstream;
      li.append(el('b', '', b.browser || 'browser'), ' ', el('span', 'muted', b.upstream), el('br'));
      li.append(b.alive ? 'holding ' : 'not answering · holding ', el('b', '', b.holding), ' · ' + b.clients + (b.clients === 1 ? ' client' : ' clients'));
      return li;
    }) : [el('li', 'muted', 'none')]));
    $('clients').textContent = fmtN(d.clients);
    const n = d.navigations;
    counts($('navs'), [
      ['passed', n.passed], ['delayed', n.delayed], ['exempt', n.exempt], ['untracked', n.untracked],
      ['foreign', n.foreign, false, 'pages none of the relay\'s clients drives, let go at once'],
      ['unheld', n.unheld, n.unheld > 0, 'navigations of the relay\'s clients that reached the network without a booking: should stay 0'],
      ['disallowed', n.disallowed || 0, false, 'navigations refused because their site\'s robots.txt disallows them (--robots obey)'],
      ['deferred', n.deferred || 0, false, 'navigations answered at once with the relay\'s own 429, never sent: slot beyond --max-wait, or the host\'s breaker open (--host-errors)'],
    ]);
    counts($('answers'), [['ok', d.answers.ok], ['overload', d.answers.overload], ['failure', d.answers.failure]]);

    const win = state.windowS * 1000;
    const list = [...state.buckets].map(([name, e]) => {
      let recent = 0;
      for (const m of e.marks.values()) if (m.at >= d.now - win) recent++;
      return { name, e, recent };
    });
    list.sort((a, b) => b.recent - a.recent || b.e.info.pressure - a.e.info.pressure || (a.name < b.name ? -1 : 1));
    const shown = state.showAll ? list : list.slice(0, ROWS);
    $('empty').hidden = list.length > 0;
    $('more').hidden = list.length <= ROWS;
    $('moreBtn').textContent = state.showAll ? 'show the busiest ' + ROWS : 'show all ' + list.length;

    const rows = $('rows');
    const ymax = scaleTop(shown, d.now, win);
    const keep = new Set(shown.map((s) => s.name));
    for (const [name, r] of state.rows) {
      if (!keep.has(name)) {
        r.root.remove();
        state.rows.delete(name);
      }
    }
    for (const s of shown) {
      let r = state.rows.get(s.name);
      if (!r) {
        r = makeRow(s.name);
        state.rows.set(s.name, r);
      }
      rows.append(r.root); // in order
      fillRow(r, s.e, d.now, win, ymax);
    }
    drawAxis(d.now, win);
  }

  function makeRow(name) {
    const root = el('div', 'row bucket');
    root.dataset.bucket = name;
    const info = el('div', 'info');
    const title = el('div', 'name', name);
    title.title = name;
    const setting = el('div', 'setting');
    const line1 = el('div', 'nums');
    const line2 = el('div', 'nums');
    const server = el('div', 'nums server'); // the server's own limits, when it said them
    info.append(title, setting, line1, line2, server);
    const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    svg.setAttribute('class', 'chart');
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', 'navigations of ' + name);
    svg.addEventListener('mousemove', (ev) => tip(svg, ev));
    svg.addEventListener('mouseleave', () => { $('tip').hidden = true; });
    root.append(info, svg);
    return { root, setting, line1, line2, server, svg };
  }

  function nums(box, items) {
    box.replaceChildren(...items.map(([label, value, cls, title]) => {
      const s = el('span', cls || '', label + ' ');
      s.append(el('b', '', value));
      if (title) s.title = title;
      return s;
    }));
  }

  // serverLine is what the bucket's server said of its own limits, while
  // it holds: its RateLimit-Policy's spacing and until when, a spent
  // quota's reset.
  function serverLine(b, now) {
    const items = [];
    if (b.server_floor_ms > 0) {
      const until = now + (b.server_floor_ends_ms || 0);
      items.push(['server', fmtMs(b.server_floor_ms) + ' until ' + clockS(until), '',
        'the server\'s RateLimit-Policy asks for ' + fmtMs(b.server_floor_ms) + ' between requests: the least spacing until ' + clockS(until) + ', an hour after the last answer that sent it']);
    }
    if (b.server_reset_ms > 0) {
      items.push(['quota resets', 'in ' + fmtMs(b.server_reset_ms), 'overload',
        'the server said its quota is spent (RateLimit r=0, X-RateLimit-Remaining: 0): nothing goes before ' + clockS(now + b.server_reset_ms)]);
    }
    return items;
  }

  function fillRow(r, e, now, win, ymax) {
    const b = e.info;
    let setting = b.mode || '';
    if (b.source && b.source !== 'flag') setting += ' · ' + b.source + (b.rule ? ': ' + b.rule : '');
    else if (b.mode) setting += ' · from the flags';
    if (b.cap > 0) setting += ' · in flight ' + b.in_flight + ' of ' + b.cap;
    r.setting.textContent = setting;
    r.setting.title = setting;
    nums(r.line1, [['pressure', fmtN(b.pressure)], ['spacing', b.spacing_ms > 0 ? fmtMs(b.spacing_ms) : '–'], ['next free', b.next_free_ms > 0 ? 'in ' + fmtMs(b.next_free_ms) : 'now']]);
    const last = b.last_answer ? [(b.last_status || '') + ' ' + b.last_answer, b.last_answer] : ['–', ''];
    const line2 = [['passed', fmtN(b.passed)], ['delayed', fmtN(b.delayed)]];
    if (b.refused > 0) line2.push(['refused', fmtN(b.refused)]);
    if (b.deferred > 0) line2.push(['deferred', fmtN(b.deferred)]);
    if (b.breaker) line2.push(['breaker', b.breaker + (b.breaker_ends_ms > 0 ? ' for ' + fmtMs(b.breaker_ends_ms) : '')]);
    line2.push(['last answer', last[0].trim(), last[1]]);
    nums(r.line2, line2);
    const server = serverLine(b, now);
    nums(r.server, server);
    r.server.hidden = server.length === 0;
    draw(r.svg, e, now, win, ymax);
  }

  // Chart geometry shared by the rows and the axis: the last win ms up to
  // now, then a zone for slots booked ahead (navigations still waiting).
  function frame(width, win) {
    const ahead = Math.round(width * 0.07);
    const plot = width - ahead;
    return { plot, aheadMs: (win * ahead) / plot, x: (now, t) => ((t - (now - win)) / win) * plot };
  }

  function tickStep(win) {
    return win <= 30000 ? 5000 : win <= 60000 ? 10000 : win <= 120000 ? 20000 : 60000;
  }

  // scaleTop is the top of the charts' common scale: the decade above
  // every spacing and wait they show.
  function scaleTop(list, now, win) {
    let v = 0;
    for (const { e } of list) {
      v = Math.max(v, e.info.spacing_ms || 0);
      for (const m of e.marks.values()) if (m.at >= now - win) v = Math.max(v, m.spacing_ms, m.waited_ms);
    }
    return decadeAbove(v);
  }

  function draw(svg, e, now, win, ymax) {
    const W = Math.max(200, Math.round(svg.getBoundingClientRect().width) || 800);
    const H = 72, top = 6, bot = 4;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const f = frame(W, win);
    const x = (t) => f.x(now, t);
    const marks = [];
    for (const m of e.marks.values()) if (m.at >= now - win && m.at <= now + f.aheadMs) marks.push(m);
    marks.sort((a, b) => a.at - b.at || a.seq - b.seq);
    const current = e.info.spacing_ms || 0;
    const span = Math.log10(ymax / LOW_MS);
    const y = (v) => H - bot - (Math.log10(Math.min(Math.max(v, LOW_MS), ymax) / LOW_MS) / span) * (H - top - bot);
    const r2 = (v) => Math.round(v * 10) / 10;

    let out = `<rect class="ahead" x="${f.plot}" y="0" width="${W - f.plot}" height="${H}"/>`;
    out += `<path class="grid" d="M0 ${r2(y(0))}H${W}`;
    for (let d = LOW_MS * 10; d <= ymax; d *= 10) out += `M0 ${r2(y(d))}H${f.plot}`;
    const step = tickStep(win);
    for (let t = step; t < win; t += step) out += `M${r2(x(now - t))} ${top}V${H - bot}`;
    out += '"/>';
    out += `<path class="nowline" d="M${f.plot} 0V${H}"/>`;
    for (let d = LOW_MS * 10; d <= ymax; d *= 10) out += `<text x="3" y="${r2(y(d) + 11)}">${d < 1000 ? d + ' ms' : d / 1000 + ' s'}</text>`;

    // 429/503 and failures: a faint line the height of the chart.
    let hitO = '', hitF = '';
    for (const m of marks) {
      if (m.answer === 'overload') hitO += `M${r2(x(m.at))} ${top}V${H - bot}`;
      else if (m.answer === 'failure') hitF += `M${r2(x(m.at))} ${top}V${H - bot}`;
    }
    if (hitO) out += `<path class="hit-overload" d="${hitO}"/>`;
    if (hitF) out += `<path class="hit-failure" d="${hitF}"/>`;
    // Their status beside them, where there is room.
    let free = -Infinity;
    for (const m of marks) {
      if (m.answer !== 'overload' && !(m.answer === 'failure' && m.status)) continue;
      const lx = x(m.at) + 3;
      if (lx < free) continue;
      out += `<text class="hit-${m.answer}" x="${r2(lx)}" y="${top + 8}">${m.status}</text>`;
      free = lx + 24;
    }

    // The spacing each navigation was booked with, as a step line, then
    // dashed to what the bucket's spacing is now.
    if (marks.length) {
      let d = `M${r2(Math.max(0, x(marks[0].at)))} ${r2(y(marks[0].spacing_ms))}`;
      for (const m of marks.slice(1)) d += `H${r2(x(m.at))}V${r2(y(m.spacing_ms))}`;
      const lx = x(marks[marks.length - 1].at);
      out += `<path class="spacing" d="${d}"/>`;
      if (lx < f.plot) out += `<path class="spacing-now" d="M${r2(lx)} ${r2(y(marks[marks.length - 1].spacing_ms))}L${f.plot} ${r2(y(current))}"/>`;
    } else if (current > 0) {
      out += `<path class="spacing-now" d="M0 ${r2(y(current))}H${f.plot}"/>`;
    }

    // One dot per navigation: when it was released, how long it waited.
    const dots = { ok: '', overload: '', failure: '', pending: '', waiting: '' };
    const rad = 2.6;
    for (const m of marks) {
      const cls = m.answer !== 'pending' ? m.answer : m.at > now ? 'waiting' : 'pending';
      const cx = r2(x(m.at)), cy = r2(y(m.waited_ms));
      dots[cls] += `M${r2(cx - rad)} ${cy}a${rad} ${rad} 0 1 0 ${2 * rad} 0a${rad} ${rad} 0 1 0 ${-2 * rad} 0`;
    }
    for (const [cls, d] of Object.entries(dots)) if (d) out += `<path class="m-${cls}" d="${d}"/>`;
    svg.innerHTML = out; // numbers and fixed names only
    svg.dataset.marks = marks.length;
    svg.view = { marks, x, now, name: svg.getAttribute('aria-label').slice('navigations of '.length) };
  }

  function drawAxis(now, win) {
    const svg = $('axisSvg');
    const W = Math.max(200, Math.round(svg.getBoundingClientRect().width) || 800);
    svg.setAttribute('viewBox', `0 0 ${W} 18`);
    const f = frame(W, win);
    const step = tickStep(win);
    let out = '';
    for (let t = 0; t <= win; t += step) {
      const s = t / 1000;
      const label = t === 0 ? 'now' : '−' + (s >= 60 ? Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0') : s + ' s');
      const anchor = t === win ? 'start' : t === 0 ? 'end' : 'middle';
      out += `<text x="${Math.round(f.x(now, now - t)) - (t === 0 ? 3 : 0)}" y="13" text-anchor="${anchor}">${label}</text>`;
    }
    out += `<text x="${f.plot + 4}" y="13">ahead</text>`;
    svg.innerHTML = out;
  }

  function tip(svg, ev) {
    const v = svg.view;
    const t = $('tip');
    if (!v || !v.marks.length) return;
    const box = svg.getBoundingClientRect();
    const scale = box.width / (svg.viewBox.baseVal.width || box.width);
    const px = (ev.clientX - box.left) / scale;
    let best = null, bestD = 8 / scale;
    for (const m of v.marks) {
      const dx = Math.abs(v.x(m.at) - px);
      if (dx < bestD) { best = m; bestD = dx; }
    }
    if (!best) {
      t.hidden = true;
      return;
    }
    t.textContent = [
      best.host || v.name,
      (best.at > v.now ? 'goes ' : 'went ') + clock(best.at),
      'waited ' + fmtMs(best.waited_ms),
      'spacing ' + fmtMs(best.spacing_ms),
      'pressure ' + best.pressure,
      answerText(best, v.now),
    ].join(' · ');
    t.hidden = false;
    t.style.left = Math.min(ev.clientX + 12, innerWidth - t.offsetWidth - 8) + 'px';
    t.style.top = ev.clientY + 14 + 'px';
  }

  poll();
})();
