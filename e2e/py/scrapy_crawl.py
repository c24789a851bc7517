"""Scrapy with scrapy-playwright through the relay: a spider that starts at
START and follows every link, each request rendered by the browser behind
the relay. Its scrapy-playwright settings are a client's own, read from the
file SETTINGS (the Go test writes there a block of README.md or
docs/clients.md, pointed at the test's relay). It prints every page it got,
with its status, and every request that failed."""

import importlib.util

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
        # A failure shows as one: a retry would hide it.
        "RETRY_ENABLED": False,
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
        failed.append({"url": failure.request.url, "error": repr(failure.value)[:300]})


process = CrawlerProcess(settings)
process.crawl(Crawl)
process.start()
done(pages=pages, failed=failed)
