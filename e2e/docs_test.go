//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/relay"
)

// pyBlock is a python block of README.md or docs/clients.md: a client's
// program, or the settings.py lines of a Scrapy project.
type pyBlock struct {
	where string // file:line of its first line
	text  string
}

// clientDocs are the files whose python blocks the tests run.
var clientDocs = []string{"../README.md", "../docs/clients.md"}

// documentedPython returns the python blocks of clientDocs.
func documentedPython(t *testing.T) []pyBlock {
	t.Helper()
	var out []pyBlock
	for _, file := range clientDocs {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cur *pyBlock
		for i, line := range strings.Split(string(b), "\n") {
			switch {
			case cur == nil && line == "```python":
				cur = &pyBlock{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(file, "../"), i+2)}
			case cur != nil && line == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.text += line + "\n"
			}
		}
	}
	return out
}

// documentedBlock returns the one python block of clientDocs that is.
func documentedBlock(t *testing.T, is func(pyBlock) bool) pyBlock {
	t.Helper()
	var found []pyBlock
	for _, b := range documentedPython(t) {
		if is(b) {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d such python blocks in %v, want 1: %v", len(found), clientDocs, found)
	}
	return found[0]
}

// isScrapySettings reports whether b is the settings of a Scrapy project.
func (b pyBlock) isScrapySettings() bool {
	return strings.Contains(b.text, "PLAYWRIGHT_CDP_URL =")
}

// needsToken reports whether b passes the relay's --token.
func (b pyBlock) needsToken() bool { return strings.Contains(b.text, "CDP_THROTTLE_TOKEN") }

// isReadmeScrapySettings: README.md's settings for Scrapy in front of Chromium.
func isReadmeScrapySettings(b pyBlock) bool {
	return strings.HasPrefix(b.where, "README.md:") && b.isScrapySettings()
}

// isLightpandaScrapySettings: docs/clients.md's settings for Scrapy in front
// of Lightpanda.
func isLightpandaScrapySettings(b pyBlock) bool {
	return b.isScrapySettings() && strings.Contains(b.text, "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT")
}

// pointedAt returns b's text with the relay's documented address replaced
// by r's, and the documented page by page.
func (b pyBlock) pointedAt(r *relayed, page string) string {
	s := strings.ReplaceAll(b.text, "127.0.0.1:9322", r.host)
	if page != "" {
		s = strings.ReplaceAll(s, "https://example.com/", page)
	}
	return s
}

// TestDocumentedClients runs every python block of README.md and
// docs/clients.md against a relay in front of the shared Chromium (one
// that wants a token where the block passes one), its address and page
// replaced by the test's: a client's program loads the page through the
// relay, which books it; a Scrapy project's settings crawl a small site
// with scrapy_crawl.py.
func TestDocumentedClients(t *testing.T) {
	blocks := documentedPython(t)
	if len(blocks) < 6 {
		t.Fatalf("found %d python blocks in %v, want the 6 and more they have", len(blocks), clientDocs)
	}
	for _, b := range blocks {
		t.Run(b.where, func(t *testing.T) {
			var opts []func(*relay.Proxy)
			var env []string
			if b.needsToken() {
				opts = append(opts, func(p *relay.Proxy) { p.Token = tokenE2E })
				env = append(env, "CDP_THROTTLE_TOKEN="+tokenE2E)
			}
			r := startRelay(t, fixed(clientSpacing, 1), opts...)
			s := newSiteAt(t, lpHost)
			if b.isScrapySettings() {
				crawlSite(s, 3)
				if res := runScrapy(t, r, b, s.url(lpHost, "/crawl?n=1"), env...); len(res.Pages) != 3 {
					t.Errorf("the spider got %d pages, want 3", len(res.Pages))
				}
				if got := len(bookings(r, lpHost)); got != 3 {
					t.Errorf("the relay booked %d navigations, want 3", got)
				}
				return
			}
			if !strings.Contains(b.text, "https://example.com/") {
				t.Fatalf("a client's block that loads no https://example.com/:\n%s", b.text)
			}
			page := s.url(lpHost, "/page?doc="+runID())
			script := filepath.Join(t.TempDir(), "client.py")
			if err := os.WriteFile(script, []byte(b.pointedAt(r, page)), 0o644); err != nil {
				t.Fatal(err)
			}
			pythonReady(t)
			runScript(t, time.Minute, venvPython, script, append(env, seleniumEnv...)...)
			if got := len(s.hitsOf(func(h hit) bool { return h.Path == "/page" })); got != 1 {
				t.Errorf("the site served the page %d times, want once", got)
			}
			if got := len(bookings(r, lpHost)); got != 1 {
				t.Errorf("the relay booked %d navigations, want 1", got)
			}
		})
	}
}
