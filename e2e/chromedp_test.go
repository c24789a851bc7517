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
	page := func(step int, extra ...string) string {
		q := url.Values{"run": {run}, "s": {fmt.Sprint(step)}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return s.url(host, "/page?"+q.Encode())
	}

	allocCtx, cancel := remote.NewAllocator(context.Background(), r.url)
	defer cancel()
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithNewBrowserContext())
	defer cancel()
	if err := chromedp.Do(ctx); err != nil { // connects and opens the tab, with no timeout
		t.Fatalf("chromedp through the relay: %v", err)
	}
	step := func(name string, f func(ctx context.Context) error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := f(sctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	do := func(steps ...chromedp.Action[chromedp.Void]) func(context.Context) error {
		return func(ctx context.Context) error { return chromedp.Do(ctx, steps...) }
	}
	// respond runs steps that start a navigation and waits for its document to load.
	respond := func(steps ...chromedp.Action[chromedp.Void]) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := chromedp.RunResponse(ctx, steps...)
			return err
		}
	}
	gesture := func(p *runtime.EvaluateParams) { p.UserGesture = new(true) }
	// other attaches to a tab the browser opened and waits for its document.
	other := func(id target.ID, marker string) func(context.Context) error {
		return func(sctx context.Context) error {
			tab, cancel := chromedp.NewContext(ctx, chromedp.WithTargetID(id))
			defer cancel()
			return settledGo(sctx, tab, marker)
		}
	}

	// As lib.mjs's warm: the tab's first load keeps the browser busy for a
	// while; let it and its slot pass, then book the slot before the first.
	step("warm", do(
		chromedp.Navigate(s.url(host, "/page?warm=1&first=1")),
		chromedp.Sleep(kindsInterval+100*time.Millisecond),
		chromedp.Navigate(s.url(host, "/page?warm=1")),
	))
	step("goto", do(chromedp.Navigate(page(1, "link", page(2)))))
	step("click", respond(chromedp.Click(chromedp.ID("link"))))
	step("reload", do(chromedp.Reload()))
	step("location", respond(chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.href = %q", page(4, "form", page(5))))))
	step("form GET", func(ctx context.Context) error {
		// A GET form replaces the action's query with its fields: make the field unique.
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#get input"), "get-"+run)); err != nil {
			return err
		}
		return respond(chromedp.Click(chromedp.ID("getbtn")))(ctx)
	})
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
