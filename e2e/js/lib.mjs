// Helpers shared by the e2e scripts. The Go test reads what a script prints
// on stdout (one JSON document) and what the web server saw; a script fails
// the test by throwing.

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

// settled waits until page (Puppeteer or Playwright) shows a document whose
// URL contains marker and that has finished loading. It works for
// navigations the script did not start itself (meta refresh, popups, new
// targets): evaluate fails while a navigation swaps documents, and is
// simply retried.
export async function settled(page, marker, timeout = 15000) {
  const deadline = Date.now() + timeout;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const s = await page.evaluate(() => [location.href, document.readyState]);
      last = s.join(' ');
      if (s[0].includes(marker) && s[1] === 'complete') return;
    } catch (e) {
      last = String(e);
    }
    await sleep(10);
  }
  throw new Error(`page never settled on ${marker}: last seen ${last}`);
}

// stepLog records when each step of a script started and ended, relative
// to the first, so a failing schedule can be traced to a slow client.
// E2E_TRACE=1 also prints each step to stderr as it starts.
export function stepLog() {
  const t0 = Date.now();
  const steps = [];
  return {
    steps,
    async run(name, f) {
      const start = Date.now() - t0;
      if (process.env.E2E_TRACE) console.error(`${start}ms ${name}`);
      await f();
      steps.push({ name, start, end: Date.now() - t0 });
    },
  };
}

// warmURL is a page of origin to load just before a test's first
// navigation to it. That navigation then waits for its slot, and a held
// request reaches the server a steady 2-6 ms after the relay lets it go;
// an unheld one can take 2-160 ms (the browser is still busy with the
// navigation it just began), which would make the first arrival a late
// anchor for the schedule. The Go side leaves out requests marked warm=1.
export const warmURL = (origin) => `${origin}/page?warm=1&t=${Date.now()}`;

// errorPage waits (briefly) until page shows the browser's error page after
// an aborted navigation, so that the next navigation does not race the
// error page's commit.
export async function errorPage(page) {
  const deadline = Date.now() + 3000;
  while (Date.now() < deadline && !page.url().startsWith('chrome-error:')) await sleep(10);
}

// warm readies a fresh page for a test's first navigation to origin: it
// loads a page of origin, waits for the browser to settle (a page's first
// load, in a window of its own, keeps it busy for a while, and a request
// released meanwhile reaches the server late) and for the slot that booked
// to pass, then loads warmURL(origin) just before the test goes on.
export async function warm(page, origin, slotMs = 300) {
  await page.goto(`${origin}/page?warm=1&first=1&t=${Date.now()}`);
  await sleep(slotMs + 100);
  await page.goto(warmURL(origin));
}

// timedGoto goes to url on page and writes into g how long it took (ms),
// and its answer's status, Retry-After and X-Cdp-Throttle, or its error:
// what a crawler's retry code reads of a goto.
export async function timedGoto(page, url, g, timeout) {
  const began = performance.now();
  try {
    const res = await page.goto(url, { timeout });
    g.took = performance.now() - began;
    g.status = res ? res.status() : 0;
    const h = res ? res.headers() : {};
    g.retryAfter = h['retry-after'] ?? '';
    g.throttle = h['x-cdp-throttle'] ?? '';
  } catch (e) {
    g.took = performance.now() - began;
    g.error = String(e.message || e).split('\n')[0];
  }
  return g;
}
