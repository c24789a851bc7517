// Playwright's page.route (continue, abort, fulfill) and httpCredentials,
// against BROWSER_URL: the relay or Chromium itself. It prints every
// request the route saw, with the host and run id replaced, so the Go test
// can compare the two runs.
import { chromium } from 'playwright-core';
import { stepLog } from './lib.mjs';
import { authURL, fulfilled, interceptRun, interceptSteps } from './intercept.mjs';

const r = interceptRun();
const at = (marker) => (u) => u.href.includes(marker);

const browser = await chromium.connectOverCDP(r.browserURL, { timeout: 30000 });
const ctx = await browser.newContext({ httpCredentials: { username: 'user', password: 'secret' } });
const log = stepLog();
try {
  const p = await ctx.newPage();
  p.setDefaultTimeout(30000);
  await p.route('**/*', (route) => {
    const act = r.act(route.request());
    if (act === 'abort') return route.abort();
    if (act === 'respond') return route.fulfill(fulfilled);
    return route.continue();
  });

  await interceptSteps(r, log, p, () => Promise.all([p.waitForURL(at('s=4')), p.click('#link')]));
  await log.run('httpCredentials', async () => {
    const res = await p.goto(authURL(r));
    if (res.status() !== 200) throw new Error(`goto with credentials: ${res.status()}`);
  });
} finally {
  await ctx.close().catch(() => {});
  await browser.close(); // connected over CDP: disconnects, the browser stays
}
console.log(JSON.stringify({ seen: r.seen, steps: log.steps }));
