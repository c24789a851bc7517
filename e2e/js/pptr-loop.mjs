// N navigations by Puppeteer, back to back, over PAGES pages at once (1 by
// default; each page takes its share): each is a Page.navigate through a
// CDP session of Puppeteer's, which answers once the document's answer is
// in (page.goto would also wait for the page to load). With ALL_PAGES=1
// the script first asks for every page of the browser, which makes
// Puppeteer set up every page there is, other clients' too.
//
// env: CDP_URL (http:// browserURL or ws:// browserWSEndpoint), PAGE_URL, N,
// PAGES, ALL_PAGES.
import puppeteer from 'puppeteer-core';
import { env, warmURL } from './lib.mjs';

const url = env('CDP_URL');
const browser = await puppeteer.connect(url.startsWith('ws') ? { browserWSEndpoint: url } : { browserURL: url });
if (process.env.ALL_PAGES) await browser.pages();
const pageURL = env('PAGE_URL');
const n = Number(env('N'));
const pages = Number(process.env.PAGES || 1);

// loop makes count navigations of a new page, then closes it.
async function loop(p, count) {
  const page = await browser.newPage();
  await page.goto(warmURL(new URL(pageURL).origin));
  const cdp = await page.createCDPSession();
  await cdp.send('Page.enable');
  await cdp.send('Page.setLifecycleEventsEnabled', { enabled: true });
  const loads = new Set(); // loaderIds of the documents that fired load
  const last = { loader: '', loaded: null };
  cdp.on('Page.lifecycleEvent', (e) => {
    if (e.name !== 'load') return;
    loads.add(e.loaderId);
    if (e.loaderId === last.loader) last.loaded?.();
  });
  for (let i = 0; i < count; i++) {
    const r = await cdp.send('Page.navigate', { url: `${pageURL}&p=${p}&i=${i}` });
    if (r.errorText) throw new Error(`page ${p}, navigation ${i}: ${r.errorText}`);
    last.loader = r.loaderId;
  }
  // Chromium (156) can leave a tab open for good when it is closed while a
  // navigation commits, which is right after Page.navigate answers: with or
  // without the relay. Let the last document load first.
  if (!loads.has(last.loader)) await new Promise((resolve) => { last.loaded = resolve; });
  await cdp.detach();
  await page.close();
}

await Promise.all(Array.from({ length: pages }, (_, p) => loop(p, Math.floor(n / pages) + (p < n % pages ? 1 : 0))));
await browser.disconnect();
console.log(JSON.stringify({ n }));
