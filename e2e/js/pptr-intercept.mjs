// Puppeteer's own request interception (continue, abort, respond) and
// page.authenticate, against BROWSER_URL: the relay or Chromium itself. It
// prints every request the interception saw, with the host and run id
// replaced, so the Go test can compare the two runs.
import puppeteer from 'puppeteer-core';
import { stepLog } from './lib.mjs';
import { authURL, fulfilled, interceptRun, interceptSteps } from './intercept.mjs';

const r = interceptRun();
const browser = await puppeteer.connect({ browserURL: r.browserURL, defaultViewport: null, protocolTimeout: 30000 });
const ctx = await browser.createBrowserContext();
const log = stepLog();
try {
  const p = await ctx.newPage();
  await p.setRequestInterception(true);
  p.on('request', (req) => {
    if (req.isInterceptResolutionHandled()) return;
    const act = r.act(req);
    if (act === 'abort') return req.abort();
    if (act === 'respond') return req.respond(fulfilled);
    return req.continue();
  });

  await interceptSteps(r, log, p, () => Promise.all([p.waitForNavigation(), p.click('#link')]));
  await log.run('authenticate', async () => {
    await p.authenticate({ username: 'user', password: 'secret' });
    const res = await p.goto(authURL(r));
    if (res.status() !== 200) throw new Error(`authenticated goto: ${res.status()}`);
  });
} finally {
  await ctx.close().catch(() => {});
  await browser.disconnect();
}
console.log(JSON.stringify({ seen: r.seen, steps: log.steps }));
