"""Playwright for Python through the relay: connect_over_cdp, a context of
its own, a page, a few gotos and a link click to one host. Each loaded
page's title (its query) is printed for the Go test, which checks the
spacing at the site."""

from playwright.sync_api import sync_playwright

from e2elib import done, env, page, warm

relay = env("RELAY")  # http://host:port
base = env("BASE")
run = env("RUN")

titles = []
with sync_playwright() as p:
    browser = p.chromium.connect_over_cdp(relay, timeout=30000)
    try:
        ctx = browser.new_context()
        pg = ctx.new_page()
        warm(pg.goto, base)
        pg.goto(page(base, run, 1, link=page(base, run, 2)))
        titles.append(pg.title())
        with pg.expect_navigation():
            pg.click("#link")
        titles.append(pg.title())
        for step in (3, 4, 5):
            pg.goto(page(base, run, step))
            titles.append(pg.title())
        ctx.close()
    finally:
        browser.close()
done(titles=titles)
