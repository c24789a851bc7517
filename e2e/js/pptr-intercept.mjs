// Puppeteer's own request interception (continue, abort, respond) and
// page.authenticate, against BROWSER_URL: the relay or Chromium itself. It
// prints every request the interception saw, with the host and run id
// replaced, so the Go test can compare the two runs.
import puppeteer from 'puppeteer-core';
import { env, errorPage, stepLog, warm } from './lib.mjs';

const browserURL = env('BROWSER_URL');
const base = env('BASE');
const run = env('RUN');
const page = (step, extra = {}) => `${base}/page?` + new URLSearchParams({ run, s: String(step), ...extra });

const browser = await puppeteer.connect({ browserURL, defaultViewport: null, protocolTimeout: 30000 });
const ctx = await browser.createBrowserContext();
const log = stepLog();
const seen = [];
const normal = (url) => url.replaceAll(base, 'BASE').replaceAll(encodeURIComponent(base), 'BASE').replaceAll(run, 'RUN');
try {
  const p = await ctx.newPage();
  await p.setRequestInterception(true);
  p.on('request', (req) => {
    if (req.isInterceptResolutionHandled()) return;
    const url = new URL(req.url());
    // Favicons come and go with how long a page stays up; warm-ups are
    // not part of the comparison.
    if (url.protocol !== 'http:' || url.pathname === '/favicon.ico' || url.searchParams.has('warm')) return req.continue();
    const act = url.searchParams.get('act');
    seen.push(`${req.method()} ${normal(req.url())} ${req.resourceType()}${req.isNavigationRequest() ? ' navigation' : ''} ${act || 'continue'}`);
    if (act === 'abort') return req.abort();
    if (act === 'respond') return req.respond({ status: 200, contentType: 'text/html', body: '<title>fulfilled</title>fulfilled by the client' });
    return req.continue();
  });

  await log.run('warm', () => warm(p, base));
  await log.run('goto with subresources', () => p.goto(page(1, { sub: '1' })));
  await log.run('goto respond', async () => {
    await p.goto(page(2, { act: 'respond' }));
    if ((await p.title()) !== 'fulfilled') throw new Error(`respond: title ${await p.title()}`);
  });
  await log.run('goto', () => p.goto(page(3, { link: page(4) })));
  await log.run('reload', () => p.reload());
  await log.run('click', () => Promise.all([p.waitForNavigation(), p.click('#link')]));
  // Aborting leaves an error page, after which Puppeteer (direct too)
  // sometimes loses the page's session on a reload: nothing reloads after it.
  await log.run('goto abort', async () => {
    const err = await p.goto(page(5, { act: 'abort' })).then(() => null, (e) => e);
    if (!err) throw new Error('an aborted navigation succeeded');
    await errorPage(p);
  });
  await log.run('goto', () => p.goto(page(6)));
  await log.run('authenticate', async () => {
    await p.authenticate({ username: 'user', password: 'secret' });
    const res = await p.goto(`${base}/auth?` + new URLSearchParams({ run, s: '7' }));
    if (res.status() !== 200) throw new Error(`authenticated goto: ${res.status()}`);
  });
} finally {
  await ctx.close().catch(() => {});
  await browser.disconnect();
}
console.log(JSON.stringify({ seen, steps: log.steps }));
