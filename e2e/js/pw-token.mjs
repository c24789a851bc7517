// Playwright's connectOverCDP against a relay that wants TOKEN (one a query
// must escape), each way a client may carry it: the webSocketDebuggerUrl
// the relay advertises, a ws:// URL with ?token= escaped by hand, the
// relay's http:// URL with ?token=, and the http:// URL with an
// Authorization header. Each way that connects opens a page and loads
// BASE/page?run=RUN&way=NAME. It prints, for each way, "ok" or the error
// it got.
import { chromium } from 'playwright-core';
import { advertised, relay, token, tryWays, ws } from './token.mjs';

await tryWays(
  {
    advertised: async () => [await advertised()],
    'by hand': async () => [`${ws}/?token=${encodeURIComponent(token)}`],
    'http with ?token=': async () => [`${relay}/?token=${encodeURIComponent(token)}`],
    'http with header': async () => [relay, { headers: { Authorization: `Bearer ${token}` } }],
  },
  {
    connect: ([url, opts = {}]) => chromium.connectOverCDP(url, { timeout: 30000, ...opts }),
    newContext: (browser) => browser.newContext(),
    close: (browser) => browser.close(), // connected over CDP: disconnects, the browser stays
  },
);
