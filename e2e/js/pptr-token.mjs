// Puppeteer against a relay that wants TOKEN (one a query must escape),
// each way a client may carry it: the webSocketDebuggerUrl the relay
// advertises, a ws:// URL with ?token= escaped by hand, a ws:// URL with an
// Authorization header, and browserURL with ?token=. Each way that connects
// opens a page and loads BASE/page?run=RUN&way=NAME. It prints, for each
// way, "ok" or the error it got.
import puppeteer from 'puppeteer-core';
import { advertised, relay, token, tryWays, ws } from './token.mjs';

await tryWays(
  {
    advertised: async () => ({ browserWSEndpoint: await advertised() }),
    'by hand': async () => ({ browserWSEndpoint: `${ws}/?token=${encodeURIComponent(token)}` }),
    header: async () => ({ browserWSEndpoint: `${ws}/`, headers: { Authorization: `Bearer ${token}` } }),
    browserURL: async () => ({ browserURL: `${relay}/?token=${encodeURIComponent(token)}` }),
  },
  {
    connect: (opts) => puppeteer.connect({ ...opts, defaultViewport: null, protocolTimeout: 30000 }),
    newContext: (browser) => browser.createBrowserContext(),
    close: (browser) => browser.disconnect(),
  },
);
