// Every way of navigating Lightpanda can do, through Puppeteer or
// Playwright (CLIENT) connected to the relay in front of `lightpanda
// serve`, one after another to one host: the Go test checks that each
// reached the server once and in its own slot. Then a redirect from ra to
// rb, whose hop must wait for rb's slot, and one from ra to itself.
// Lightpanda serves one page per connection: the redirect step opens a
// second connection for rb's page.
//
// env: CLIENT (puppeteer or playwright), RELAY, BASE, RA, RB, RUN.
import puppeteer from 'puppeteer-core';
import { chromium } from 'playwright-core';
import { env, sleep, stepLog, warmURL } from './lib.mjs';

const client = env('CLIENT');
const relay = env('RELAY');
const base = env('BASE');
const ra = env('RA');
const rb = env('RB');
const run = env('RUN');
const page = (origin, step, extra = {}) => `${origin}/page?` + new URLSearchParams({ run, s: String(step), ...extra });
const redirect = (origin, to) => `${origin}/redirect?` + new URLSearchParams({ run, to });

// open connects a client of its own and returns a page and a way to close.
async function open() {
  if (client === 'puppeteer') {
    const browser = await puppeteer.connect({ browserURL: relay, protocolTimeout: 30000 });
    const p = await browser.newPage();
    return {
      p,
      nav: (marker, f) => Promise.all([p.waitForNavigation(), f()]),
      back: () => p.goBack(),
      forward: () => p.goForward(),
      close: () => browser.disconnect(),
    };
  }
  const browser = await chromium.connectOverCDP(relay);
  const context = browser.contexts()[0] ?? (await browser.newContext());
  const p = await context.newPage();
  return {
    p,
    nav: (marker, f) => Promise.all([p.waitForURL((u) => u.href.includes(marker), { waitUntil: 'load' }), f()]),
    back: () => p.goBack(),
    forward: () => p.goForward(),
    close: () => browser.close(),
  };
}

const log = stepLog();
const a = await open();
try {
  const { p, nav } = a;
  // A first load to the host, then one just before the run, its slot gone by.
  await log.run('warm', async () => {
    await p.goto(`${base}/page?warm=1&first=1&t=${Date.now()}`);
    await sleep(400);
    await p.goto(warmURL(base));
  });
  await log.run('goto', () => p.goto(page(base, 1, { link: page(base, 2) })));
  await log.run('click', () => nav('s=2', () => p.click('#link')));
  await log.run('reload', () => p.reload());
  await log.run('location', () => nav('s=4', () => p.evaluate((u) => { location.href = u; }, page(base, 4, { form: page(base, 5) }))));
  await log.run('form GET', async () => {
    await p.evaluate((v) => { document.querySelector('#get input').value = v; }, `get-${run}`);
    await nav('f=get', () => p.click('#getbtn'));
  });
  await log.run('goto', () => p.goto(page(base, 6, { form: page(base, 7) })));
  await log.run('form POST', () => nav('s=7', () => p.click('#postbtn')));
  await log.run('goto', () => p.goto(page(base, 8)));
  await log.run('goto', () => p.goto(page(base, 9)));
  await log.run('back', () => a.back());
  await log.run('forward', () => a.forward());
  await log.run('goto with subresources', async () => {
    await p.goto(page(base, 10, { sub: '1' }));
    await sleep(300); // fetch and XHR may still be under way at load
  });

  // Redirects: rb's first page (on a second connection) and ra's redirect
  // to rb together, each waiting for its host's slot; the hop lands on rb
  // before rb's next slot and must wait for it.
  const b = await open();
  try {
    await log.run('warm rb', async () => {
      await b.p.goto(`${rb}/page?warm=1&first=1&t=${Date.now()}`);
      await sleep(400);
      await b.p.goto(warmURL(rb));
    });
    await log.run('warm ra', () => p.goto(warmURL(ra)));
    await log.run('rb + redirect ra→rb', () => Promise.all([
      b.p.goto(page(rb, 1)),
      p.goto(redirect(ra, page(rb, 2))).then(() => {
        if (!p.url().startsWith(rb)) throw new Error(`redirect ended at ${p.url()}`);
      }),
    ]));
  } finally {
    await b.close();
  }
  await log.run('redirect ra→ra', () => p.goto(redirect(ra, page(ra, 3))));
  await log.run('goto ra', () => p.goto(page(ra, 4)));
} finally {
  await a.close();
}
console.log(JSON.stringify({ steps: log.steps }));
