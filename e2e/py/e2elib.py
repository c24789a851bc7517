"""Helpers shared by the e2e Python scripts.

The Go test reads what a script prints on stdout (one JSON document) and
what the web server saw; a script fails the test by raising.
"""

import json
import os
import time
from urllib.parse import urlencode


def env(name):
    v = os.environ.get(name)
    if not v:
        raise SystemExit(f"{name} is not set")
    return v


def page(origin, run, step, **extra):
    """A /page URL of origin with a unique step marker and the site's
    extras (link, form, ...): its title is its query."""
    return f"{origin}/page?" + urlencode({"run": run, "s": str(step), **extra})


def warm(goto, origin, slot_s=0.3):
    """Readies a fresh page for a test's first navigation to origin, as
    js/lib.mjs's warm does: a first load keeps a fresh page busy for a
    while, and a request released meanwhile reaches the server late, so
    it loads a page of origin, waits for the slot that booked to pass,
    then loads another just before the test goes on. The Go side leaves
    out requests marked warm=1."""
    goto(f"{origin}/page?" + urlencode({"warm": 1, "first": 1, "t": time.time_ns()}))
    time.sleep(slot_s + 0.1)
    goto(f"{origin}/page?" + urlencode({"warm": 1, "t": time.time_ns()}))


def done(**result):
    print(json.dumps(result))
