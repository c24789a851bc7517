"""What Playwright for Python sees of a navigation the relay defers
(--max-wait), beside its goto of a 429 the site makes itself, as
js/defer-clients.mjs does for Node: through the relay at RELAY, a page goes
to DEFERRED/status?code=429&ra=10 (the site's 429, which moves the host's
next slot 10 s ahead), then N times a goto of DEFERRED/page (the relay
defers it) and one of BASELINE/status?code=429&ra=10 (a host the relay
never holds). With LP=1 (Lightpanda) the page is in the connection's own
context. Prints the gotos as defer-clients.mjs does."""

import json
import os
import time

from playwright.sync_api import Error, sync_playwright

from e2elib import env

relay = env("RELAY")  # http://host:port
deferred_base = env("DEFERRED")
baseline_base = env("BASELINE")
run = env("RUN")
n = int(env("N"))
lp = bool(os.environ.get("LP"))

gotos = []


def go(pg, kind, i, url):
    g = {"kind": kind, "i": i, "start": int(time.time() * 1000)}
    began = time.perf_counter()
    try:
        res = pg.goto(url, timeout=30000)
        g["took"] = (time.perf_counter() - began) * 1000
        g["status"] = res.status if res else 0
        h = res.headers if res else {}
        g["retryAfter"] = h.get("retry-after", "")
        g["throttle"] = h.get("x-cdp-throttle", "")
    except Error as e:
        g["took"] = (time.perf_counter() - began) * 1000
        g["error"] = str(e.message).split("\n")[0]
    gotos.append(g)


with sync_playwright() as p:
    browser = p.chromium.connect_over_cdp(relay, timeout=60000)
    try:
        ctx = (browser.contexts[0] if browser.contexts else browser.new_context()) if lp else browser.new_context()
        pg = ctx.new_page()
        go(pg, "first", 0, f"{deferred_base}/status?code=429&ra=10&run={run}")
        for i in range(1, n + 1):
            go(pg, "deferred", i, f"{deferred_base}/page?run={run}&i={i}")
            go(pg, "baseline", i, f"{baseline_base}/status?code=429&ra=10&run={run}&i={i}")
        if not lp:
            ctx.close()
    finally:
        browser.close()
print(json.dumps(gotos))
