// Every kind of top-level navigation, through Puppeteer connected to the
// relay, one after another to one host: the Go test checks that each
// reached the server once and in its own slot. Then a redirect from ra to
// rb, whose hop must wait for rb's slot, and one from ra to itself.
import puppeteer from 'puppeteer-core';
import { env, settled, stepLog, warm, warmURL } from './lib.mjs';

const relay = env('RELAY');
const base = env('BASE'); // http://HOST:PORT of the host every step navigates to
const ra = env('RA');
const rb = env('RB');
const run = env('RUN');

// page builds a /page URL on origin with a unique step marker and the
// given extras (link, form, meta, unload).
const page = (origin, step, extra = {}) =>
  `${origin}/page?` + new URLSearchParams({ run, s: String(step), ...extra });
const redirect = (origin, to) => `${origin}/redirect?` + new URLSearchParams({ run, to });

const browser = await puppeteer.connect({ browserURL: relay, defaultViewport: null, protocolTimeout: 30000 });
const ctx = await browser.createBrowserContext();
const log = stepLog();
const cdp = await browser.target().createCDPSession();
const closeLater = [];
try {
  const p = await ctx.newPage();
  const nav = (f) => Promise.all([p.waitForNavigation(), f()]);

  await log.run('warm', () => warm(p, base));
  await log.run('goto', () => p.goto(page(base, 1, { link: page(base, 2) })));
  await log.run('click', () => nav(() => p.click('#link')));
  await log.run('reload', () => p.reload());
  await log.run('location', () => nav(() => p.evaluate((u) => { location.href = u; }, page(base, 4, { form: page(base, 5) }))));
  await log.run('form GET', async () => {
    // A GET form replaces the action's query with its fields: make the field unique.
    await p.$eval('#get input', (el, v) => { el.value = v; }, `get-${run}`);
    await nav(() => p.click('#getbtn'));
  });
  await log.run('goto', () => p.goto(page(base, 6, { form: page(base, 7) })));
  await log.run('form POST', () => nav(() => p.click('#postbtn')));
  await log.run('goto unload', () => p.goto(page(base, 8, { unload: '1' })));
  await log.run('goto', () => p.goto(page(base, 9)));
  await log.run('back', async () => {
    const r = await p.goBack();
    if (!r) throw new Error('goBack did not reach the network (restored from the back/forward cache?)');
  });
  await log.run('goto meta', () => p.goto(page(base, 11, { meta: page(base, 12) })));
  await log.run('meta refresh', () => settled(p, 's=12'));
  await log.run('window.open', async () => {
    const opened = new Promise((resolve) => p.once('popup', resolve));
    await p.evaluate((u) => { window.open(u); }, page(base, 13));
    await settled(await opened, 's=13');
  });
  // Pages created with a URL.
  await log.run('Target.createTarget', async () => {
    const { targetId } = await cdp.send('Target.createTarget', { url: page(base, 14), browserContextId: ctx.id });
    closeLater.push(targetId);
    const t = await browser.waitForTarget((t) => t.url().includes(`run=${run}&s=14`));
    await settled(await t.page(), 's=14');
  });
  await log.run('PUT /json/new', async () => {
    // Chrome takes the whole query as the URL, unescaped.
    const res = await fetch(`${relay}/json/new?${encodeURIComponent(page(base, 15))}`, { method: 'PUT' });
    if (res.status !== 200) throw new Error(`PUT /json/new: ${res.status} ${await res.text()}`);
    closeLater.push((await res.json()).id);
    const t = await browser.waitForTarget((t) => t.url().includes(`run=${run}&s=15`));
    await settled(await t.page(), 's=15');
  });

  // Redirects. Both hosts are booked first, rb just before ra; then rb's
  // first page and ra's redirect to rb go together, each waiting for its
  // host's slot. The redirect's hop lands on rb before rb's next slot and
  // must wait for it. (q is made now: a page in the background takes no
  // clicks, and the clicks above are p's.)
  const q = await ctx.newPage();
  await log.run('warm rb', () => warm(q, rb));
  await log.run('warm ra', () => p.goto(warmURL(ra)));
  await log.run('rb + redirect ra→rb', () => Promise.all([
    q.goto(page(rb, 1)),
    p.goto(redirect(ra, page(rb, 2))).then(() => {
      if (!p.url().startsWith(rb)) throw new Error(`redirect ended at ${p.url()}`);
    }),
  ]));
  await log.run('redirect ra→ra', () => p.goto(redirect(ra, page(ra, 3))));
  await log.run('goto ra', () => p.goto(page(ra, 4)));
} finally {
  for (const targetId of closeLater) await cdp.send('Target.closeTarget', { targetId }).catch(() => {});
  await ctx.close().catch(() => {});
  await browser.disconnect();
}
console.log(JSON.stringify({ steps: log.steps }));
