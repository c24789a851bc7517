//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCrashFailsClosed kills the relay's process (SIGKILL, as the OOM
// killer does) while it holds a crawl's navigations to one host (20
// pages, 500 ms apart, burst 1), about 2 s after the first reached the
// site, in front of a Chromium started on its own: the relay runs beside
// its guardian (package guardian, the process the command starts, which
// outlives it). Without the guardian, Chromium let every held request go
// once the relay's connections went: the 16 still held reached the site
// within ~100 ms. Now nothing it held reaches the site after the kill
// (one let go as the kill came may): the guardian answers each with the
// relay's 429 (reason=relay-gone); the pages the client created are
// closed; the guardian exits, status 1, saying what it did.
func TestCrashFailsClosed(t *testing.T) {
	t.Run("chromium-upstream", func(t *testing.T) { runCrash(t, upstreamCase(t, "crash.test")) })
	// Without a guardian (it launched the browser, which dies with it;
	// Lightpanda, whose navigations are held in the clients' connections,
	// which die with it), nothing it held reaches the site either.
	t.Run("chromium-launch", func(t *testing.T) { runCrash(t, launchCase(t, "crash.test")) })
	t.Run("lightpanda", func(t *testing.T) { runCrash(t, lightpandaCase(t)) })
}

// runCrash is one case of TestCrashFailsClosed: the relay's process
// SIGKILLed (the guardian's child, in front of a browser it did not
// start); in a Chromium it did not start (c.direct), the guardian answers
// what it held and closes its client's pages.
func runCrash(t *testing.T, c stopCase) {
	host, pages := c.host, c.clients*c.pages
	s := newSite(t)
	run, isDoc, first := watchRun(s, host)
	r := startStoppingRelay(t, c.browser...)
	worker, guarded := r.cmd.Process.Pid, c.direct != ""
	if !c.launched { // in front of a browser it did not start: beside a guardian
		worker = int(r.logs.waitFor(t, "guardian: the relay runs as a child of this process, which answers what it holds if it dies without a stop", 5*time.Second)["pid"].(float64))
	}
	crawl := startStopCrawl(t, r.url, s.url(host, ""), run, c.clients, c.pages)
	crawl.untilSignal(t, first)
	killAt := time.Now()
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The pages the client created, closed by the guardian.
	targets := crawl.targets()
	var left []string
	closedAfter := time.Duration(-1)
	for deadline := killAt.Add(5 * time.Second); guarded; time.Sleep(20 * time.Millisecond) {
		if left = pagesLeft(t, c.direct, host, targets); len(left) == 0 {
			closedAfter = time.Since(killAt)
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the guardian still runs 15 s after its relay was killed")
	}
	time.Sleep(time.Until(r.exitAt.Add(stopQuiet)))
	docs := byArrival(t, host, s.hitsOf(isDoc))

	after, least := 0, time.Duration(-1)
	for k, d := range docs {
		if d.reached().After(killAt) {
			after++
		}
		if k > 0 {
			if g := d.reached().Sub(docs[k-1].reached()); least < 0 || g < least {
				least = g
			}
		}
	}
	refused, errored := 0, 0
	select {
	case <-crawl.exited:
		for _, g := range crawl.gotos() {
			switch {
			case g.Status == 429 && (strings.Contains(g.Throttle, "reason=relay-gone") || strings.Contains(g.Throttle, "reason=stopping")):
				refused++
			case g.Error != "":
				errored++
			}
		}
	case <-time.After(30 * time.Second):
		t.Errorf("stop-crawl.mjs still running 30 s after the kill")
	}
	took := map[string]any{}
	if found := r.logs.withMessage("guardian: the relay's process is gone: what it held was answered with the relay's 429, never let go"); len(found) > 0 {
		took = found[len(found)-1]
	}
	held := "nothing for a guardian to answer (a browser the relay launched goes with it; Lightpanda's held navigations end with their connections)"
	if guarded {
		held = fmt.Sprintf("the guardian answered %v held navigations; the client's pages closed %.1f ms after the kill (%d left)", took["answered"], ms(closedAfter), len(left))
	}
	t.Logf("%d documents reached the site, %d after the kill; least gap %.1f ms; %s; the command exited %.1f ms after the kill (%v); gotos: %d got the relay's 429 (relay-gone), %d an error (the client's connection died with the relay)",
		len(docs), after, ms(least), held, ms(r.exitAt.Sub(killAt)), r.exitErr, refused, errored)
	if least >= 0 && least < stopMinGap {
		t.Errorf("least gap at the site: %.1f ms, want at least %v:%s", ms(least), stopMinGap, describeDocs(docs))
	}
	if after > 1 {
		t.Errorf("%d documents reached the site after the kill, want at most the one let go as it came:%s", after, describeDocs(docs))
	}
	if !guarded {
		return
	}
	if n, _ := took["answered"].(float64); int(n)+len(docs) < pages-1 {
		t.Errorf("the guardian answered %v navigations and %d reached the site, want the rest of the %d answered", took["answered"], len(docs), pages)
	}
	if len(left) > 0 {
		t.Errorf("pages of the client still open 5 s after the kill: %v", left)
	}
	if r.exitErr == nil {
		t.Errorf("the guardian exited 0 after its relay was killed, want a failure status")
	}
}
