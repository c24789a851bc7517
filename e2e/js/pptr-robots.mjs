// Puppeteer through a relay that may obey robots.txt (--robots obey): each
// step of STEPS (comma-separated) navigates to BASE one way, and the script
// prints, for each, "ok" or the error it ended with. The Go test checks
// what the web server saw. With LP=1 (Lightpanda, one page per connection,
// no browser contexts of its own) the page is the connection's.
//   goto-private: page.goto(/private/x)
//   goto-public:  page.goto(/public/x)
//   click:        a link click into /private/y
//   redirect:     page.goto(/public/redir), which redirects to /private/z
//   goto-private-again: page.goto(/private/x2)
//   subresources: page.goto(/public/withsub), whose image, iframe and fetch
//                 are under /private/
import puppeteer from 'puppeteer-core';
import { env } from './lib.mjs';

const relay = env('RELAY');
const base = env('BASE');
const steps = env('STEPS').split(',');

const lp = !!process.env.LP;
const browser = await puppeteer.connect({ browserURL: relay, defaultViewport: null, protocolTimeout: 30000 });
const ctx = lp ? null : await browser.createBrowserContext();
const result = {};
try {
  const p = lp ? await browser.newPage() : await ctx.newPage();
  const goto = async (path) => {
    const res = await p.goto(base + path);
    if (!res || res.status() !== 200) throw new Error(`HTTP ${res ? res.status() : 'no response'}`);
  };
  const ways = {
    'goto-private': () => goto('/private/x'),
    'goto-private-again': () => goto('/private/x2'),
    'goto-public': () => goto('/public/x'),
    click: async () => {
      await goto('/page?' + new URLSearchParams({ link: '/private/y' }));
      const [res] = await Promise.all([p.waitForNavigation(), p.click('#link')]);
      // A blocked click shows the browser's error page, with no response.
      if (!res || res.status() !== 200) throw new Error(`click landed on ${p.url()} with ${res ? 'HTTP ' + res.status() : 'no response'}`);
    },
    redirect: () => goto('/public/redir'),
    subresources: async () => {
      await goto('/public/withsub');
      await p.waitForFunction(() => window.fetched === true, { timeout: 10000 });
    },
  };
  for (const step of steps) {
    try {
      await ways[step]();
      result[step] = 'ok';
    } catch (e) {
      result[step] = String(e.message || e).split('\n')[0];
    }
  }
} finally {
  if (ctx) await ctx.close();
  await browser.disconnect();
}
console.log(JSON.stringify(result));
