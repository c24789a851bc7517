// N navigations by Puppeteer, two at a time, each of which ends one way
// (WAY): answer (200), 5xx (500), reset (the server closes the connection
// without answering), close (page.close() while the request is at the
// server, which holds it). Each navigation is a page.goto of a page of
// its own worker; for close, a fresh page each time.
//
// env: CDP_URL (browserURL), BASE (the host's origin as Chromium reaches
// it), SEEN (the same server's /seen, as this process reaches it), WAY, N,
// RUN.
import puppeteer from 'puppeteer-core';
import { env, sleep } from './lib.mjs';

const browser = await puppeteer.connect({ browserURL: env('CDP_URL') });
const base = env('BASE');
const seenURL = env('SEEN');
const way = env('WAY');
const n = Number(env('N'));
const run = env('RUN');

// seen waits until the server has the request marked leak=marker.
async function seen(marker) {
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const r = await fetch(`${seenURL}?leak=${marker}`);
    if (Number(await r.text()) > 0) return;
    await sleep(5);
  }
  throw new Error(`the server never saw ${marker}`);
}

async function worker(w, count) {
  let page = way === 'close' ? null : await browser.newPage();
  for (let i = 0; i < count; i++) {
    const marker = `${run}-${w}-${i}`;
    switch (way) {
      case 'answer':
        await page.goto(`${base}/page?leak=${marker}`);
        break;
      case '5xx':
        await page.goto(`${base}/status?code=500&leak=${marker}`);
        break;
      case 'reset':
        try {
          await page.goto(`${base}/reset?leak=${marker}`);
          throw new Error('a reset connection loaded');
        } catch (e) {
          if (!String(e).includes('net::ERR_')) throw e;
        }
        // Chromium reloads an error page by itself after 1 s, 5 s, 30 s,
        // 1 min… (NetErrorAutoReload), and a page closed while one of
        // those commits can stay open for good: leave the error page.
        await page.goto('about:blank');
        break;
      case 'close': {
        page = await browser.newPage();
        const going = page.goto(`${base}/hang?leak=${marker}`).catch(() => {});
        await seen(marker);
        await page.close();
        await going;
        break;
      }
      default:
        throw new Error(`unknown WAY ${way}`);
    }
  }
  if (page && !page.isClosed()) await page.close();
}

await Promise.all([worker(0, Math.ceil(n / 2)), worker(1, Math.floor(n / 2))]);
await browser.disconnect();
console.log(JSON.stringify({ way, n }));
