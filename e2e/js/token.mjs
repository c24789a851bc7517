// What pptr-token.mjs and pw-token.mjs share: the relay and the token a
// query must escape, and the loop that tries each way a client may carry
// the token. env: RELAY (http://HOST:PORT), TOKEN, BASE, RUN.
import { env } from './lib.mjs';

export const relay = env('RELAY');
export const token = env('TOKEN');
export const ws = relay.replace(/^http/, 'ws');

// advertised is the webSocketDebuggerUrl the relay advertises.
export async function advertised() {
  const res = await fetch(`${relay}/json/version?token=${encodeURIComponent(token)}`);
  if (!res.ok) throw new Error(`/json/version: HTTP ${res.status}`);
  return (await res.json()).webSocketDebuggerUrl;
}

// tryWays connects with what each of ways gives (client.connect), opens a
// page in a new context of it (client.newContext) and loads
// BASE/page?run=RUN&way=NAME, and disconnects (client.close). It prints,
// for each way, "ok" or the error it got.
export async function tryWays(ways, client) {
  const base = env('BASE');
  const run = env('RUN');
  const result = {};
  for (const [way, opts] of Object.entries(ways)) {
    try {
      const browser = await client.connect(await opts());
      try {
        const ctx = await client.newContext(browser);
        const p = await ctx.newPage();
        const res = await p.goto(`${base}/page?` + new URLSearchParams({ run, way }));
        if (res.status() !== 200) throw new Error(`goto: HTTP ${res.status()}`);
        await ctx.close();
      } finally {
        await client.close(browser);
      }
      result[way] = 'ok';
    } catch (e) {
      result[way] = String(e?.message ?? e);
    }
  }
  console.log(JSON.stringify(result));
}
