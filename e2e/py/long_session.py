"""A long session through the relay, as a crawler keeps one: Selenium
(ChromeDriver attached by debuggerAddress) or Playwright for Python
(connect_over_cdp), CLIENT, connected for minutes with idle gaps (IDLE_S)
and big messages: a full-page screenshot of a noisy page over 1 MB
(Chromium, SHOT=1), or a 1.5 MB string from the page (Lightpanda). Two
navigations back to back after each gap: the second waits for its slot.
Prints what it loaded and the size of each big message."""

import base64
import time

from e2elib import done, env, page

client = env("CLIENT")
relay = env("RELAY")  # http://host:port
base = env("BASE")
run = env("RUN")
idle = float(env("IDLE_S"))
tail = float(env("TAIL_S"))
shot = env("SHOT") == "1"

titles, big, steps = [], [], []
t0 = time.monotonic()


def step(name, f):
    start = time.monotonic() - t0
    f()
    steps.append({"name": name, "start": round(start * 1000), "end": round((time.monotonic() - t0) * 1000)})


def session(goto, title, screenshot, evaluate):
    def load(n):
        goto(page(base, run, n))
        titles.append(title())

    def big_message():
        if shot:
            goto(f"{base}/noise?run={run}")
            big.append(len(screenshot()))
        else:
            big.append(evaluate("'x'.repeat(1.5e6).length"))

    step("load 1", lambda: load(1))
    step("big 1", big_message)
    step("idle 1", lambda: time.sleep(idle))
    step("load 2", lambda: load(2))
    step("load 3", lambda: load(3))
    step("idle 2", lambda: time.sleep(idle))
    step("load 4", lambda: load(4))
    step("load 5", lambda: load(5))
    step("big 2", big_message)
    step("tail", lambda: time.sleep(tail))


if client == "selenium":
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.debugger_address = relay.removeprefix("http://")
    driver = webdriver.Chrome(options=options)
    try:
        driver.switch_to.new_window("tab")
        session(
            driver.get,
            lambda: driver.title,
            # Chrome's full-page screenshot command, through ChromeDriver.
            lambda: base64.b64decode(driver.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True})["data"]),
            lambda e: driver.execute_script("return " + e),
        )
        step("close", driver.close)
    finally:
        driver.quit()
else:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(relay, timeout=60000)
        ctx = browser.contexts[0] if browser.contexts else browser.new_context()
        pg = ctx.new_page()
        session(pg.goto, pg.title, lambda: pg.screenshot(full_page=True), pg.evaluate)
        step("close", browser.close)
done(titles=titles, big=big, steps=steps)
