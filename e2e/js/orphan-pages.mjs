// A Puppeteer client that opens PAGES pages through the relay, each on
// SITE's page marked who=WHO, says so on stdout ({"ready":n}), and then
// stays connected until its process is killed, as a crashed crawler
// would leave them.
//
// env: RELAY, SITE, WHO, PAGES, RUN.
import puppeteer from 'puppeteer-core';
import { env } from './lib.mjs';

const browser = await puppeteer.connect({ browserURL: env('RELAY'), protocolTimeout: 30000 });
const n = Number(env('PAGES'));
for (let i = 0; i < n; i++) {
  const p = await browser.newPage();
  await p.goto(`${env('SITE')}/page?` + new URLSearchParams({ run: env('RUN'), who: env('WHO'), n: String(i) }));
}
console.log(JSON.stringify({ ready: n }));
setInterval(() => {}, 1 << 30);
