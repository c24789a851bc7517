//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// TestNavKindsChromedp: through chromedp's remote allocator pointed at the
// relay's HTTP address, Navigate, a link click, Reload, a location.href
// assignment, form GET and POST, NavigateBack past an unload handler, a
// window.open popup, Target.createTarget with a URL and PUT /json/new to
// one host each take exactly one slot.
func TestNavKindsChromedp(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(kindsInterval, 1))
	const host = "chromedp.test"
	run := runID()
	page := kindsPage(s, host, run)
	tab := openChromedpTab(t, r.url, chromedp.WithNewBrowserContext())
	ctx, step := tab.ctx, tab.step
	gesture := func(p *runtime.EvaluateParams) { p.UserGesture = new(true) }
	// other attaches to a tab the browser opened and waits for its document.
	other := func(id target.ID, marker string) func(context.Context) error {
		return func(sctx context.Context) error {
			tab, cancel := chromedp.NewContext(ctx, chromedp.WithTargetID(id))
			defer cancel()
			return settledGo(sctx, tab, marker)
		}
	}

	tab.firstKinds(s, host, run, page)
	step("goto", do(chromedp.Navigate(page(6, "form", page(7)))))
	step("form POST", respond(chromedp.Submit(chromedp.ID("post"))))
	step("goto unload", do(chromedp.Navigate(page(8, "unload", "1"))))
	step("goto", do(chromedp.Navigate(page(9))))
	step("back", do(chromedp.NavigateBack()))
	step("window.open", func(sctx context.Context) error {
		opened := chromedp.WaitNewTarget(sctx, func(*target.Info) bool { return true })
		if err := chromedp.Do(sctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("void window.open(%q)", page(11)), gesture)); err != nil {
			return err
		}
		select {
		case id := <-opened:
			return other(id, "s=11")(sctx)
		case <-sctx.Done():
			return fmt.Errorf("no popup: %w", sctx.Err())
		}
	})
	step("Target.createTarget", func(sctx context.Context) error {
		res, err := chromedp.CallBrowser(sctx, target.CreateTarget, target.CreateTargetParams{
			URL: page(12), BrowserContextID: chromedp.FromContext(ctx).BrowserContextID,
		})
		if err != nil {
			return err
		}
		return other(res.TargetID, "s=12")(sctx)
	})
	step("PUT /json/new", func(sctx context.Context) error {
		// Chrome takes the whole query as the URL, unescaped.
		req, _ := http.NewRequestWithContext(sctx, http.MethodPut, r.url+"/json/new?"+url.QueryEscape(page(13)), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var tg struct{ ID target.ID }
		if err := decodeJSON(resp, &tg); err != nil {
			return err
		}
		// It opens in the default browser context: close it when done.
		defer chromedp.CallBrowser(ctx, target.CloseTarget, target.CloseTargetParams{TargetID: tg.ID})
		return other(tg.ID, "s=13")(sctx)
	})

	checkSlots(t, r, host, navigations(s, host), 13, kindsInterval)
}

// kindsPage makes the URL of a numbered step of a run on host; extra holds
// query pairs, such as a link or form target the page should carry.
func kindsPage(s *site, host, run string) func(step int, extra ...string) string {
	return func(step int, extra ...string) string {
		q := url.Values{"run": {run}, "s": {fmt.Sprint(step)}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return s.url(host, "/page?"+q.Encode())
	}
}

// chromedpTab is a chromedp tab opened through a relay's HTTP address.
type chromedpTab struct {
	t   *testing.T
	ctx context.Context
}

// openChromedpTab connects chromedp's remote allocator to relayURL and
// opens a tab; both end when the test does.
func openChromedpTab(t *testing.T, relayURL string, opts ...chromedp.ContextOption) chromedpTab {
	t.Helper()
	allocCtx, cancel := remote.NewAllocator(context.Background(), relayURL)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(allocCtx, opts...)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // connects and opens the tab, with no timeout
		t.Fatalf("chromedp through the relay: %v", err)
	}
	return chromedpTab{t: t, ctx: ctx}
}

// step runs f in the tab within 30 s and fails the test if it fails.
func (c chromedpTab) step(name string, f func(ctx context.Context) error) {
	c.t.Helper()
	sctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := f(sctx); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
}

// do runs steps in order.
func do(steps ...chromedp.Action[chromedp.Void]) func(context.Context) error {
	return func(ctx context.Context) error { return chromedp.Do(ctx, steps...) }
}

// respond runs steps that start a navigation and waits for its document to load.
func respond(steps ...chromedp.Action[chromedp.Void]) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := chromedp.RunResponse(ctx, steps...)
		return err
	}
}

// firstKinds warms the tab, then takes steps 1 to 5 of page: goto, a link
// click, reload, a location.href assignment and a GET form.
func (c chromedpTab) firstKinds(s *site, host, run string, page func(step int, extra ...string) string) {
	// As lib.mjs's warm: the tab's first load keeps the browser busy for a
	// while; let it and its slot pass, then book the slot before the first.
	c.step("warm", do(
		chromedp.Navigate(s.url(host, "/page?warm=1&first=1")),
		chromedp.Sleep(kindsInterval+100*time.Millisecond),
		chromedp.Navigate(s.url(host, "/page?warm=1")),
	))
	c.step("goto", do(chromedp.Navigate(page(1, "link", page(2)))))
	c.step("click", respond(chromedp.Click(chromedp.ID("link"))))
	c.step("reload", do(chromedp.Reload()))
	c.step("location", respond(chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.href = %q", page(4, "form", page(5))))))
	c.step("form GET", func(ctx context.Context) error {
		// A GET form replaces the action's query with its fields: make the field unique.
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#get input"), "get-"+run)); err != nil {
			return err
		}
		return respond(chromedp.Click(chromedp.ID("getbtn")))(ctx)
	})
}

// settledGo waits until tab shows a loaded document whose URL contains
// marker; evaluating fails while documents swap, and is retried.
func settledGo(ctx context.Context, tab context.Context, marker string) error {
	last := ""
	for {
		st, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[location.href, document.readyState]`))
		if err == nil && len(st) == 2 {
			if strings.Contains(st[0], marker) && st[1] == "complete" {
				return nil
			}
			last = strings.Join(st, " ")
		} else if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("never settled on %s, last seen %s: %w", marker, last, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func decodeJSON(resp *http.Response, v any) error {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return json.Unmarshal(body, v)
}
