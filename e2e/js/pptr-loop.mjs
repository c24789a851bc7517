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
await cdp.send('Page.enable');
await cdp.send('Page.setLifecycleEventsEnabled', { enabled: true });
const loads = new Set(); // loaderIds of the documents that fired load
const loaded = { id: '', resolve: null };
cdp.on('Page.lifecycleEvent', (e) => {
  if (e.name !== 'load') return;
  loads.add(e.loaderId);
  if (e.loaderId === loaded.id) loaded.resolve?.();
});
const n = Number(env('N'));
for (let i = 0; i < n; i++) {
  const r = await cdp.send('Page.navigate', { url: `${pageURL}&i=${i}` });
  if (r.errorText) throw new Error(`navigation ${i}: ${r.errorText}`);
  loaded.id = r.loaderId;
}
// Chromium (156) can leave a tab open for good when it is closed while a
// navigation commits, which is right after Page.navigate answers: with or
// without the relay. Let the last document load first.
if (!loads.has(loaded.id)) await new Promise((resolve) => { loaded.resolve = resolve; });
await cdp.detach();
if (process.env.LOOP_DEBUG) console.error('closing');
await page.close();
if (process.env.LOOP_DEBUG) console.error('closed');
await browser.disconnect();
console.log(JSON.stringify({ n }));
