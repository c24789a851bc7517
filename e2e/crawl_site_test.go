//go:build e2e

package e2e

// What the site sees of a crawl of many pages at once: each run of
// BenchmarkCrawl and BenchmarkCrawlLightpanda navigates to a page URL of
// its own, so that the site's record of its navigations, stamped by the
// site's kernel as they arrived, can be told apart run by run.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// crawlPage is the page a run crawls: the site's /four, named for the run
// (&c=CLIENT&k=LOAD is added by the crawl).
func crawlPage(s *remoteSite, round int, name string) string {
	return s.url(siteIP, fmt.Sprintf("/four?run=%d-%s", round, name))
}

// siteArrivals returns the navigations of one run of the crawl (its
// crawlPage) in the order they reached the site, each At when the site's
// kernel stamped its arrival.
func siteArrivals(b *testing.B, s *remoteSite, round int, name string) []hit {
	b.Helper()
	prefix := fmt.Sprintf("run=%d-%s&", round, name)
	docs := s.hitsOf(func(h hit) bool { return h.Path == "/four" && strings.HasPrefix(h.Query, prefix) })
	return byArrival(b, name, docs)
}

// crawlSpacing is the fixed spacing a run of the crawl asks the relay for
// (holdArgs), or 0 when it asks for none to check at the site: the floor,
// a run holding nothing, and anything but a burst of 1.
func crawlSpacing(name string) time.Duration {
	if name == "floor" {
		return 0
	}
	var delay, burst string
	flags := holdArgs(name)
	for i, f := range flags {
		v, ok := "", false
		if strings.Contains(f, "=") {
			f, v, ok = strings.Cut(f, "=")
		} else if i+1 < len(flags) {
			v, ok = flags[i+1], true
		}
		switch {
		case ok && f == "--http-nav-delay":
			delay = v
		case ok && f == "--http-nav-burst":
			burst = v
		}
	}
	d, err := time.ParseDuration(delay)
	if err != nil || burst != "1" {
		return 0
	}
	return d
}

// checkSite says what the site saw of a run (and, of a relay, how often
// its held navigations left late and moved their schedule), and fails the
// benchmark when two of its navigations reached the site closer than its
// spacing less exactSlack (for a spacing above exactSlack: below it the
// schedule's spacing is less than what the relay cannot see).
func checkSite(b *testing.B, name string, arrived []hit, cr crawlRun) string {
	b.Helper()
	if len(arrived) < 4 {
		return "site: fewer than 4 navigations"
	}
	gaps := gapsAfter(arrived, 1)
	sorted := slices.Sorted(slices.Values(gaps))
	said := fmt.Sprintf("site: gaps lowest %.1f %.1f %.1f ms, p50 %.1f ms, mean %.1f ms", ms(sorted[0]), ms(sorted[1]), ms(sorted[2]), ms(sorted[len(sorted)/2]), ms(mean(gaps)))
	if name != "floor" {
		said += fmt.Sprintf("; left late %d, schedule pushed %.1f s, let go past the wait for the one before %d", cr.late, cr.pushed.Seconds(), cr.overtook)
	}
	spacing := crawlSpacing(name)
	if spacing <= exactSlack {
		return said
	}
	under := 0
	for i, g := range gaps {
		if g < spacing-exactSlack {
			under++
			b.Logf("%s: %s and %s reached the site %.1f ms apart (%d and %d of %d, at %s)", name, arrived[i].Query, arrived[i+1].Query, ms(g), i+1, i+2, len(arrived), arrived[i+1].At.Format("15:04:05.000"))
		}
	}
	if under > 0 {
		b.Errorf("%s: %d of %d navigations reached the site closer than %v after the one before (lowest %.1f ms)", name, under, len(gaps)+1, spacing-exactSlack, ms(sorted[0]))
	}
	return fmt.Sprintf("%s; %d under %v", said, under, spacing-exactSlack)
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
