// Puppeteer clients crawling one host through a fleet of relays that the Go
// test restarts one after another (rolling_test.go). Each client is a loop:
// connect (browserURL) to its home relay, create a page, load a page of
// WARM_BASE (another host of the same site, so that the page's first load,
// which leaves the browser late, is not one the test times), then
// page.goto(BASE/page?run=RUN&c=C&r=R&k=K) back to back, each URL unique.
//
// The loop is cut when its connection closes, when a goto throws, or when
// a goto gets anything but a 200 (the relay's own 429 with X-Cdp-Throttle
// reason=stopping while it stops): the client then lets its page and
// connection go, waits 200-500 ms and connects again, with a new page, and
// carries on. It connects to its home relay first each time; while that
// refuses (503 while stopping, connection refused while down), it tries it
// again every 200-500 ms, and once it has failed for PATIENCE ms it tries
// the other relays too, each round home first. A connection or page that
// fails counts as a further cut of the same run of cuts.
//
// Each client counts its gotos that reached a 200 (gotos), those answered
// with the relay's stopping 429 (refused), other statuses, errors, cuts,
// the cuts followed by a goto that reached a 200 after reconnecting
// (carried: every cut before such a goto is carried on by it), reconnects
// (connections after the first), connection attempts that failed, and
// connections to each relay. At DURATION ms the loops stop after their
// goto under way; a loop whose last cut was not carried on yet goes on
// trying for GRACE ms more, so that a restart at the very end is not taken
// for a loop that never carried on.
//
// It prints one JSON document: {"clients": [...], "duration": ms,
// "unhandled": the promise rejections no one handled, each on stderr}.
//
// env: RELAYS (comma-separated http://HOST:PORT), HOMES (comma-separated
// index into RELAYS of each client's home; one client each), BASE and
// WARM_BASE (http://HOST:PORT), RUN, DURATION (ms); GRACE (ms, 30000),
// PATIENCE (ms, 6000), TIMEOUT (each goto's, ms, 30000).
import puppeteer from 'puppeteer-core';
import { env, sleep, timedGoto } from './lib.mjs';

const relays = env('RELAYS').split(',');
const homes = env('HOMES').split(',').map(Number);
const base = env('BASE');
const warmBase = env('WARM_BASE');
const run = env('RUN');
const duration = Number(env('DURATION'));
const grace = Number(process.env.GRACE || 30000);
const patience = Number(process.env.PATIENCE || 6000);
const timeout = Number(process.env.TIMEOUT || 30000);
const trace = process.env.E2E_TRACE ? (c, ...a) => console.error(`${Date.now() - t0}ms c${c}`, ...a) : () => {};

// Puppeteer's own calls may reject when a relay closes a connection under
// them; that is a cut the loops see, not the script's end.
let unhandled = 0;
process.on('unhandledRejection', (e) => {
  unhandled++;
  console.error(`unhandled rejection: ${String((e && e.message) || e).split('\n')[0]}`);
});

const t0 = Date.now();
const deadline = t0 + duration;
const pause = () => sleep(200 + Math.random() * 300);
const firstLine = (e) => String((e && e.message) || e).split('\n')[0];

// within resolves to what p resolves to, or to fallback after ms, never
// rejecting.
const within = (p, ms, fallback) => Promise.race([Promise.resolve(p).catch((e) => e), sleep(ms).then(() => fallback)]);

async function client(c) {
  const home = homes[c];
  const out = {
    client: c, home, gotos: 0, refused: 0, other: 0, errors: 0, cuts: 0, carried: 0, pending: 0,
    reconnects: 0, connectFailures: 0, connects: relays.map(() => 0), warmed: 0, samples: [],
  };
  const sample = (what) => {
    if (out.samples.length < 8 && !out.samples.includes(what)) out.samples.push(what);
  };
  const cut = (why) => {
    out.cuts++;
    out.pending++;
    sample(why);
    trace(c, 'cut:', why);
  };
  // over: the crawl is over for this loop, unless a cut still waits to be
  // carried on (then until the grace ends).
  const over = () => Date.now() >= deadline && (out.pending === 0 || Date.now() >= deadline + grace);
  let connected = 0;
  let failingSince = 0;

  while (!over()) {
    // Connect: home first, the others too once home failed PATIENCE ms.
    let browser = null;
    let r = home;
    const order = failingSince && Date.now() - failingSince >= patience
      ? relays.map((_, k) => (home + k) % relays.length)
      : [home];
    for (const k of order) {
      try {
        browser = await puppeteer.connect({ browserURL: relays[k], defaultViewport: null, protocolTimeout: 20000 });
        r = k;
        break;
      } catch (e) {
        out.connectFailures++;
        trace(c, `connect ${k}:`, firstLine(e));
      }
    }
    if (!browser) {
      if (!failingSince) failingSince = Date.now();
      await pause();
      continue;
    }
    failingSince = 0;
    if (connected++ > 0) out.reconnects++;
    out.connects[r]++;
    trace(c, `connected to ${r}`);
    let gone = false;
    const disconnected = new Promise((resolve) =>
      browser.once('disconnected', () => {
        gone = true;
        resolve('disconnected');
      }),
    );
    // step runs f, or gives up 1.5 s after the connection closed.
    const lost = {};
    const step = async (f) => {
      const got = await Promise.race([f(), disconnected.then(() => sleep(1500)).then(() => lost)]);
      if (got === lost) throw new Error('still under way 1.5 s after the connection closed');
      return got;
    };
    let page = null;
    try {
      page = await step(() => browser.newPage());
      await step(() => page.goto(`${warmBase}/page?warm=1&run=${run}&c=${c}&r=${r}&t=${Date.now()}`, { timeout }));
      out.warmed++;
      while (!over()) {
        const url = `${base}/page?run=${run}&c=${c}&r=${r}&k=${out.gotos + out.refused + out.other + out.errors}`;
        const g = {};
        const done = timedGoto(page, url, g, timeout).then(() => 'done');
        const left = disconnected.then(() => sleep(1500)).then(() => 'left');
        if ((await Promise.race([done, left])) === 'left') {
          out.errors++;
          cut('goto still pending 1.5 s after the connection closed');
          break;
        }
        if (g.error) {
          out.errors++;
          cut(`goto threw: ${g.error}`);
          break;
        }
        if (g.status === 429 && String(g.throttle).includes('reason=stopping')) {
          out.refused++;
          cut(`429 ${g.throttle} retry-after ${g.retryAfter}`);
          break;
        }
        if (g.status !== 200) {
          out.other++;
          cut(`status ${g.status} x-cdp-throttle ${g.throttle}`);
          break;
        }
        out.gotos++;
        if (out.pending > 0) {
          out.carried += out.pending;
          out.pending = 0;
        }
        if (gone) {
          cut('connection closed');
          break;
        }
      }
    } catch (e) {
      // newPage or the warm-up failed: the relay is stopping, or went.
      out.errors++;
      cut(`${gone ? 'connection closed' : 'setup threw'}: ${firstLine(e)}`);
    }
    if (page && !gone) await within(page.close(), 500);
    if (!gone) await within(browser.disconnect(), 500);
    if (!over()) await pause();
  }
  return out;
}

const clients = await Promise.all(homes.map((_, c) => client(c)));
console.log(JSON.stringify({ clients, duration: Date.now() - t0, unhandled }));
process.exit(0);
