"""Scrapy with scrapy-playwright through the relay: a spider that starts at
START and follows every link, each request rendered by the browser behind
the relay. Its scrapy-playwright settings are a client's own, read from the
file SETTINGS (the Go test writes there a block of README.md or
docs/clients.md, pointed at the test's relay). It prints every page it got,
with its status, and every request that failed, with how often Scrapy
retried it and, when it failed on its answer, that answer's status and
X-Cdp-Throttle header. With RETRY=1 Scrapy retries as it does by default
(RetryMiddleware); otherwise it does not, so that a failure shows."""

import importlib.util
import os

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.settings import Settings

from e2elib import done, env

spec = importlib.util.spec_from_file_location("client_settings", env("SETTINGS"))
client = importlib.util.module_from_spec(spec)
spec.loader.exec_module(client)

settings = Settings()
settings.setmodule(client, priority="project")
settings.setdict(
    {
        "LOG_LEVEL": "WARNING",
        "ROBOTSTXT_OBEY": False,
        # A failure shows as one: a retry would hide it, unless asked for.
        "RETRY_ENABLED": os.environ.get("RETRY") == "1",
        "TELNETCONSOLE_ENABLED": False,
    },
    priority="cmdline",
)

pages, failed = [], []


class Crawl(scrapy.Spider):
    name = "crawl"

    async def start(self):
        yield scrapy.Request(env("START"), meta={"playwright": True}, errback=self.failed)

    def parse(self, response):
        pages.append({"url": response.url, "status": response.status})
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, meta={"playwright": True}, errback=self.failed)

    def failed(self, failure):
        f = {"url": failure.request.url, "error": repr(failure.value)[:300], "retries": failure.request.meta.get("retry_times", 0)}
        response = getattr(failure.value, "response", None)
        if response is not None:
            f["status"] = response.status
            f["throttle"] = (response.headers.get("X-Cdp-Throttle") or b"").decode()
        failed.append(f)


process = CrawlerProcess(settings)
process.crawl(Crawl)
process.start()
done(pages=pages, failed=failed)
