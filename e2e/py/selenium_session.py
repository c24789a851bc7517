"""Selenium (ChromeDriver attached by debuggerAddress) keeping one session
through the relay for a long time, as a crawl does: MODE=active loads two
pages back to back (the second waits for its slot) every INTERVAL_S for
DURATION_S; MODE=idle loads a page, waits DURATION_S doing nothing, and
loads another. ChromeDriver answers no ping: a relay that pings its
clients and closes those that do not answer ends the session. Prints the
title of every page it loaded."""

import time

from selenium import webdriver

from e2elib import done, env, page

relay = env("RELAY_ADDR")  # host:port, as debuggerAddress takes it
base = env("BASE")
run = env("RUN")
mode = env("MODE")
duration = float(env("DURATION_S"))

options = webdriver.ChromeOptions()
options.debugger_address = relay
driver = webdriver.Chrome(options=options)
titles = []
step = 0


def load():
    global step
    step += 1
    driver.get(page(base, run, step))
    titles.append(driver.title)


try:
    driver.switch_to.new_window("tab")
    start = time.monotonic()
    if mode == "active":
        interval = float(env("INTERVAL_S"))
        while time.monotonic() - start < duration:
            began = time.monotonic()
            load()
            load()
            time.sleep(max(0, interval - (time.monotonic() - began)))
    else:
        load()
        time.sleep(duration)
        load()
    driver.close()
finally:
    driver.quit()
done(titles=titles, seconds=round(time.monotonic() - start))
