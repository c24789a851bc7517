// The navigation kinds Playwright can express, through connectOverCDP to
// the relay, one after another to one host: the Go test checks that each
// reached the server once and in its own slot.
import { chromium } from 'playwright-core';
import { env, settled, stepLog, warm } from './lib.mjs';

const relay = env('RELAY');
const base = env('BASE');
const run = env('RUN');

const page = (step, extra = {}) => `${base}/page?` + new URLSearchParams({ run, s: String(step), ...extra });
const at = (marker) => (u) => u.href.includes(marker);

const browser = await chromium.connectOverCDP(relay, { timeout: 30000 });
const ctx = await browser.newContext();
const log = stepLog();
try {
  const p = await ctx.newPage();
  p.setDefaultTimeout(30000);

  await log.run('warm', () => warm(p, base));
  await log.run('goto', () => p.goto(page(1, { link: page(2) })));
  await log.run('click', () => Promise.all([p.waitForURL(at('s=2')), p.click('#link')]));
  await log.run('reload', () => p.reload());
  await log.run('location', () => Promise.all([
    p.waitForURL(at('s=4')),
    p.evaluate((u) => { location.href = u; }, page(4, { form: page(5) })),
  ]));
  await log.run('form GET', async () => {
    // A GET form replaces the action's query with its fields: make the field unique.
    await p.fill('#get input', `get-${run}`);
    await Promise.all([p.waitForURL(at(`f=get-${run}`)), p.click('#getbtn')]);
  });
  await log.run('goto', () => p.goto(page(6, { form: page(7) })));
  await log.run('form POST', () => Promise.all([p.waitForURL(at('s=7')), p.click('#postbtn')]));
  await log.run('goto unload', () => p.goto(page(8, { unload: '1' })));
  await log.run('goto', () => p.goto(page(9)));
  await log.run('back', async () => {
    const r = await p.goBack();
    if (!r) throw new Error('goBack did not reach the network (restored from the back/forward cache?)');
  });
  await log.run('goto meta', () => p.goto(page(11, { meta: page(12) })));
  await log.run('meta refresh', () => settled(p, 's=12'));
  await log.run('popup', async () => {
    const [popup] = await Promise.all([p.waitForEvent('popup'), p.evaluate((u) => { window.open(u); }, page(13))]);
    await popup.waitForURL(at('s=13'));
  });
} finally {
  await ctx.close().catch(() => {});
  await browser.close(); // connected over CDP: disconnects, the browser stays
}
console.log(JSON.stringify({ steps: log.steps }));
