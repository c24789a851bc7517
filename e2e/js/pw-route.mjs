// Playwright's page.route (continue, abort, fulfill) and httpCredentials,
// against BROWSER_URL: the relay or Chromium itself. It prints every
// request the route saw, with the host and run id replaced, so the Go test
// can compare the two runs.
import { chromium } from 'playwright-core';
import { env, errorPage, stepLog, warm } from './lib.mjs';

const browserURL = env('BROWSER_URL');
const base = env('BASE');
const run = env('RUN');
const page = (step, extra = {}) => `${base}/page?` + new URLSearchParams({ run, s: String(step), ...extra });
const at = (marker) => (u) => u.href.includes(marker);

const browser = await chromium.connectOverCDP(browserURL, { timeout: 30000 });
const ctx = await browser.newContext({ httpCredentials: { username: 'user', password: 'secret' } });
const log = stepLog();
const seen = [];
const normal = (url) => url.replaceAll(base, 'BASE').replaceAll(encodeURIComponent(base), 'BASE').replaceAll(run, 'RUN');
try {
  const p = await ctx.newPage();
  p.setDefaultTimeout(30000);
  await p.route('**/*', (route) => {
    const req = route.request();
    const url = new URL(req.url());
    // Favicons come and go with how long a page stays up; warm-ups are
    // not part of the comparison.
    if (url.protocol !== 'http:' || url.pathname === '/favicon.ico' || url.searchParams.has('warm')) return route.continue();
    const act = url.searchParams.get('act');
    seen.push(`${req.method()} ${normal(req.url())} ${req.resourceType()}${req.isNavigationRequest() ? ' navigation' : ''} ${act || 'continue'}`);
    if (act === 'abort') return route.abort();
    if (act === 'respond') return route.fulfill({ status: 200, contentType: 'text/html', body: '<title>fulfilled</title>fulfilled by the client' });
    return route.continue();
  });

  await log.run('warm', () => warm(p, base));
  await log.run('goto with subresources', () => p.goto(page(1, { sub: '1' })));
  await log.run('goto respond', async () => {
    await p.goto(page(2, { act: 'respond' }));
    if ((await p.title()) !== 'fulfilled') throw new Error(`respond: title ${await p.title()}`);
  });
  await log.run('goto', () => p.goto(page(3, { link: page(4) })));
  await log.run('reload', () => p.reload());
  await log.run('click', () => Promise.all([p.waitForURL(at('s=4')), p.click('#link')]));
  await log.run('goto abort', async () => {
    const err = await p.goto(page(5, { act: 'abort' })).then(() => null, (e) => e);
    if (!err) throw new Error('an aborted navigation succeeded');
    await errorPage(p);
  });
  await log.run('goto', () => p.goto(page(6)));
  await log.run('httpCredentials', async () => {
    const res = await p.goto(`${base}/auth?` + new URLSearchParams({ run, s: '7' }));
    if (res.status() !== 200) throw new Error(`goto with credentials: ${res.status()}`);
  });
} finally {
  await ctx.close().catch(() => {});
  await browser.close(); // connected over CDP: disconnects, the browser stays
}
console.log(JSON.stringify({ seen, steps: log.steps }));
