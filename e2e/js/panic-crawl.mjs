// CLIENTS Puppeteer clients, each its own connection with one page,
// navigate N times each to PAGE_URL (goto, back to back). Client 0 sends
// the relay's fault command (CdpThrottle.panic, which only a relay built
// with the faultinject tag knows) after its first goto: its connection
// should end, and every other client's crawl go on.
//
// env: CDP_URL (http:// browserURL), PAGE_URL, N, CLIENTS.
import puppeteer from 'puppeteer-core';
import { env } from './lib.mjs';

const url = env('CDP_URL');
const pageURL = env('PAGE_URL');
const n = Number(env('N'));
const clients = Number(env('CLIENTS'));

async function crawl(c) {
  const out = { client: c, done: 0, error: '', disconnected: false };
  let browser;
  try {
    browser = await puppeteer.connect({ browserURL: url });
    browser.on('disconnected', () => { out.disconnected = true; });
    const page = await browser.newPage();
    for (let i = 0; i < n; i++) {
      await page.goto(`${pageURL}&c=${c}&i=${i}`, { timeout: 60000 });
      out.done++;
      if (c === 0 && i === 0) {
        const cdp = await page.createCDPSession();
        // Never answered: the connection ends under it.
        cdp.send('CdpThrottle.panic').catch(() => {});
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    await page.close();
    await browser.disconnect();
  } catch (e) {
    out.error = String(e).split('\n')[0];
  }
  return out;
}

const results = await Promise.all(Array.from({ length: clients }, (_, c) => crawl(c)));
console.log(JSON.stringify({ results }));
