// N navigations of one Puppeteer page, back to back: each is a
// Page.navigate through Puppeteer's own CDP session, which answers once the
// document's answer is in (page.goto would also wait for the page to
// load). With ALL_PAGES=1 the script first asks for every page of the
// browser, which makes Puppeteer set up every page there is, other
// clients' too.
//
// env: CDP_URL (http:// browserURL or ws:// browserWSEndpoint), PAGE_URL, N,
// ALL_PAGES.
import puppeteer from 'puppeteer-core';
import { env, warmURL } from './lib.mjs';

const url = env('CDP_URL');
const browser = await puppeteer.connect(url.startsWith('ws') ? { browserWSEndpoint: url } : { browserURL: url });
if (process.env.ALL_PAGES) await browser.pages();
const page = await browser.newPage();
const pageURL = env('PAGE_URL');
await page.goto(warmURL(new URL(pageURL).origin));
const cdp = await page.createCDPSession();
const n = Number(env('N'));
for (let i = 0; i < n; i++) {
  const r = await cdp.send('Page.navigate', { url: `${pageURL}&i=${i}` });
  if (r.errorText) throw new Error(`navigation ${i}: ${r.errorText}`);
}
await cdp.detach();
await page.close();
await browser.disconnect();
console.log(JSON.stringify({ n }));
