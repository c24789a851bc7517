// Two Puppeteer clients of one `lightpanda serve` through the relay: A
// ends with browser.close(), which Lightpanda takes as the end of A's own
// connection's browser; B must go on navigating.
//
// env: RELAY, SITE, RUN.
import puppeteer from 'puppeteer-core';
import { env, sleep } from './lib.mjs';

const url = (who, n) => `${env('SITE')}/page?` + new URLSearchParams({ run: env('RUN'), who, n: String(n) });
const a = await puppeteer.connect({ browserURL: env('RELAY'), protocolTimeout: 30000 });
const b = await puppeteer.connect({ browserURL: env('RELAY'), protocolTimeout: 30000 });
let aGone = false;
a.on('disconnected', () => { aGone = true; });
const aPage = await a.newPage();
const bPage = await b.newPage();
await aPage.goto(url('a', 0));
await bPage.goto(url('b', 0));
const out = {};
try {
  await a.close();
  out.aClose = 'ok';
} catch (e) {
  out.aClose = `error: ${e.message}`;
}
for (const deadline = Date.now() + 5000; !aGone && Date.now() < deadline; ) await sleep(10);
out.aDisconnected = aGone;
out.b = [];
for (let n = 1; n <= 3; n++) {
  await bPage.goto(url('b', n));
  out.b.push(await bPage.evaluate(() => new URLSearchParams(location.search).get('n')));
}
b.disconnect();
console.log(JSON.stringify(out));
