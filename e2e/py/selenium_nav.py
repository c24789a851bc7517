"""Selenium through the relay: ChromeDriver attaches to the browser behind
it by debuggerAddress (the relay's host:port), opens a tab of its own, and
makes a few navigations to one host: gets, a link click, a refresh. Each
loaded page's title (its query) is printed for the Go test, which checks
the spacing at the site."""

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from e2elib import done, env, page, warm

relay = env("RELAY_ADDR")  # host:port, as debuggerAddress takes it
base = env("BASE")
run = env("RUN")

options = webdriver.ChromeOptions()
options.debugger_address = relay
driver = webdriver.Chrome(options=options)
titles = []


def loaded(marker):
    """Waits until the tab shows a loaded document marked marker (a click
    does not wait for the navigation it starts), and keeps its title."""
    WebDriverWait(driver, 15).until(
        lambda d: marker in d.current_url and d.execute_script("return document.readyState") == "complete"
    )
    titles.append(driver.title)


try:
    driver.switch_to.new_window("tab")
    warm(driver.get, base)
    driver.get(page(base, run, 1, link=page(base, run, 2)))
    loaded("s=1")
    driver.find_element(By.ID, "link").click()
    loaded("s=2")
    driver.refresh()
    loaded("s=2")
    driver.get(page(base, run, 4))
    loaded("s=4")
    driver.get(page(base, run, 5))
    loaded("s=5")
    driver.close()
finally:
    driver.quit()
done(titles=titles)
