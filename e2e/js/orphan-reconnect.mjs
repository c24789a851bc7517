// A Puppeteer client that opens PAGES pages, disconnects, connects again
// within the relay's orphan timeout, finds its pages and drives each once
// (evaluate), then waits well past the timeout (WAIT_MS) and checks every
// page is still there and as it left it.
//
// env: RELAY, SITE, PAGES, RUN, WAIT_MS.
import puppeteer from 'puppeteer-core';
import { env, sleep } from './lib.mjs';

const relay = env('RELAY');
const run = env('RUN');
const n = Number(env('PAGES'));
const mine = (u) => u.includes(`run=${run}`) && u.includes('who=reconnect');
let browser = await puppeteer.connect({ browserURL: relay, protocolTimeout: 30000 });
for (let i = 0; i < n; i++) {
  const p = await browser.newPage();
  await p.goto(`${env('SITE')}/page?` + new URLSearchParams({ run, who: 'reconnect', n: String(i) }));
}
browser.disconnect();
await sleep(500);

browser = await puppeteer.connect({ browserURL: relay, protocolTimeout: 30000 });
const pages = (await browser.pages()).filter((p) => mine(p.url()));
const found = [];
for (const p of pages) found.push(await p.evaluate(() => new URLSearchParams(location.search).get('n')));
await sleep(Number(env('WAIT_MS')));
const after = [];
for (const p of (await browser.pages()).filter((p) => mine(p.url()))) {
  after.push(await p.evaluate(() => new URLSearchParams(location.search).get('n')));
}
browser.disconnect();
console.log(JSON.stringify({ found: found.sort(), after: after.sort() }));
