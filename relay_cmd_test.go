package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/relay"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// relayConfigOf reads a relay command line the way the command does, and
// returns the configuration without running anything.
func relayConfigOf(t *testing.T, args ...string) (relayConfig, error) {
	t.Helper()
	var cfg relayConfig
	var err error
	app := newApp(io.Discard, io.Discard)
	app.Action = func(c *cli.Context) error {
		cfg, err = relayConfigFrom(c, io.Discard)
		return nil
	}
	if runErr := cmdline.Run(context.Background(), app, append([]string{"cdp-throttle"}, args...)); runErr != nil {
		return cfg, runErr
	}
	return cfg, err
}

// TestListenDefault checks that the relay listens on the loopback address
// unless told otherwise.
func TestListenDefault(t *testing.T) {
	cfg, err := relayConfigOf(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != "127.0.0.1:9322" || !relay.Loopback(cfg.listen) {
		t.Errorf("got --listen %q, want 127.0.0.1:9322", cfg.listen)
	}
}

// TestListenBeyondLoopback checks that listening where other machines can
// reach the relay needs a token (flag or environment) or
// --insecure-listen, and that the refusal says why, on one line, with
// exit status 2.
func TestListenBeyondLoopback(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		ok   bool
	}{
		{name: "all IPv4 interfaces", args: []string{"--listen", "0.0.0.0:9322"}},
		{name: "all IPv6 interfaces", args: []string{"--listen", "[::]:9322"}},
		{name: "empty host", args: []string{"--listen", ":9322"}},
		{name: "a LAN address", args: []string{"--listen", "192.0.2.10:9322"}},
		{name: "a name", args: []string{"--listen", "relay.example:9322"}},
		{name: "from the environment", env: map[string]string{"CDP_THROTTLE_LISTEN": "0.0.0.0:9322"}},
		{name: "empty token", args: []string{"--listen", "0.0.0.0:9322", "--token", ""}},
		{name: "loopback", args: []string{"--listen", "127.0.0.1:9322"}, ok: true},
		{name: "other loopback address", args: []string{"--listen", "127.0.0.7:9322"}, ok: true},
		{name: "IPv6 loopback", args: []string{"--listen", "[::1]:9322"}, ok: true},
		{name: "localhost", args: []string{"--listen", "localhost:9322"}, ok: true},
		{name: "with --token", args: []string{"--listen", "0.0.0.0:9322", "--token", "s3cret"}, ok: true},
		{name: "with CDP_THROTTLE_TOKEN", args: []string{"--listen", "0.0.0.0:9322"}, env: map[string]string{"CDP_THROTTLE_TOKEN": "s3cret"}, ok: true},
		{name: "with --insecure-listen", args: []string{"--listen", "0.0.0.0:9322", "--insecure-listen"}, ok: true},
		{name: "with CDP_THROTTLE_INSECURE_LISTEN", args: []string{"--listen", "0.0.0.0:9322"}, env: map[string]string{"CDP_THROTTLE_INSECURE_LISTEN": "true"}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := relayConfigOf(t, tt.args...)
			if tt.ok {
				if err != nil {
					t.Fatalf("got %v, want the listen address accepted", err)
				}
				return
			}
			var ue cmdline.UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v (listen %q), want a usage error (exit status 2)", err, cfg.listen)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "--token") || !strings.Contains(msg, "--insecure-listen") || !strings.Contains(msg, "reachable from other machines") {
				t.Errorf("got %q, want one line explaining the risk and naming --token and --insecure-listen", msg)
			}
		})
	}
	// The command itself refuses before it listens or looks for a browser.
	_, _, err := runCLI(t, "--listen", "0.0.0.0:0", "--upstream", "http://127.0.0.1:1")
	var ue cmdline.UsageError
	if !errors.As(err, &ue) {
		t.Errorf("run: got %v, want a usage error", err)
	}
}

// TestRunTokenAndShutdown runs the relay command with its token from
// CDP_THROTTLE_TOKEN and an upstream given with credentials, at debug
// level: every endpoint wants the token, the URL the relay advertises
// carries it and works, ending the command's context (as SIGINT and
// SIGTERM do) ends the client's connection as a browser's exit does (no
// close frame) and returns no error (exit 0),
// and the log names neither the token nor the credentials nor a message.
func TestRunTokenAndShutdown(t *testing.T) {
	const token = "env-token-5ecret"
	// The least a browser endpoint must do for the relay with its limiter
	// off: /json/version, and websockets that echo an empty result.
	browser := fakebrowser.NewScripted(t, func(_ int, c *websocket.Conn, _ <-chan struct{}) {
		fakebrowser.Echo(c)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	t.Setenv("CDP_THROTTLE_TOKEN", token)
	upstream := "http://user:upstreampw-5ecret@" + strings.TrimPrefix(browser.URL, "http://")
	logs := &fakebrowser.Logs{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"cdp-throttle", "--listen", listen, "--upstream", upstream, "--http-nav-delay", "0",
			"--log-level", "debug", "--log-format", "json"}, io.Discard, logs)
	}()
	base := "http://" + listen
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/json/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("/json/version without the token: got %d, want 401", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay not up: %v\n%s", err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, path := range []string{"/json/list", "/json/protocol", "/json/new", "/"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: got %d, want 401", path, resp.StatusCode)
		}
	}
	resp, err := http.Get(base + "/json/version?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ WebSocketDebuggerURL string }
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	c, _, err := websocket.DefaultDialer.Dial(v.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatalf("dialing the advertised %q: %v", v.WebSocketDebuggerURL, err)
	}
	defer c.Close()
	c.WriteMessage(websocket.TextMessage, []byte(`{"id":1,"method":"Runtime.evaluate","params":{"expression":"'body-5ecret'"}}`))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != `{"id":1,"result":{}}` {
		t.Fatalf("client got %q, %v", msg, err)
	}

	cancel() // what SIGINT and SIGTERM do
	var ce *websocket.CloseError
	if _, _, err := c.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseAbnormalClosure {
		t.Errorf("client got %v, want its connection ended without a close frame (1006)", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v, want nil (exit status 0)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run still going 30 s after its context ended")
	}
	if _, err := net.DialTimeout("tcp", listen, time.Second); err == nil {
		t.Errorf("relay still accepts connections after shutting down")
	}
	out := logs.String()
	for _, secret := range []string{token, "upstreampw-5ecret", "body-5ecret"} {
		if strings.Contains(out, secret) {
			t.Errorf("log names %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, `"message":"shutting down"`) {
		t.Errorf("log does not say it is shutting down:\n%s", out)
	}
}

// TestMaxMessageSizeFlag checks the read limit is configurable, from the
// flag or the environment, and refuses what would break CDP.
func TestMaxMessageSizeFlag(t *testing.T) {
	cfg, err := relayConfigOf(t, "--max-message-size", "2048")
	if err != nil || cfg.proxy.MaxMessageSize != 2048 {
		t.Errorf("--max-message-size 2048: got %d, %v", cfg.proxy.MaxMessageSize, err)
	}
	t.Setenv("CDP_THROTTLE_MAX_MESSAGE_SIZE", "4096")
	if cfg, err = relayConfigOf(t); err != nil || cfg.proxy.MaxMessageSize != 4096 {
		t.Errorf("CDP_THROTTLE_MAX_MESSAGE_SIZE=4096: got %d, %v", cfg.proxy.MaxMessageSize, err)
	}
	var ue cmdline.UsageError
	if _, err := relayConfigOf(t, "--max-message-size", "10"); !errors.As(err, &ue) {
		t.Errorf("--max-message-size 10: got %v, want a usage error", err)
	}
}

// TestBrowsersFlag checks what --browsers and a browser command accept,
// before anything starts: each refusal is a usage error naming the fix.
func TestBrowsersFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for fine
	}{
		{[]string{"--", "chromium", "--remote-debugging-port=0"}, ""},
		{[]string{"--browsers", "4", "--", "lightpanda", "serve", "--port", "{port}"}, ""},
		{[]string{"--browsers", "0", "--", "lightpanda", "serve"}, "--browsers 0: want 1 or more"},
		{[]string{"--browsers", "2"}, "--browsers 2 needs a browser command after --"},
		{[]string{"--browsers", "2", "--", "chromium", "--remote-debugging-port=9222"}, "put {port} in the command"},
		{[]string{"--", "lightpanda", "serve", "--http-nav-delay", "100"}, "give it to the relay instead"},
	}
	for _, tt := range tests {
		cfg, err := relayConfigOf(t, tt.args...)
		var ue cmdline.UsageError
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tt.args, err)
		case tt.want == "" && cfg.upstreams != nil:
			t.Errorf("%q: upstreams %q, want none: the relay fronts what it starts", tt.args, cfg.upstreams)
		case tt.want != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: got %v, want a usage error with %q", tt.args, err, tt.want)
		}
	}
}

// TestPolitenessFlags: the cap on navigations in flight, the overload
// statuses and the latency backoff, from flags and the environment, and
// their defaults: no cap, 429 and 503, off.
func TestPolitenessFlags(t *testing.T) {
	cfg, err := relayConfigOf(t)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.policy; p.Concurrency != 0 || p.ConcurrencyBound != 30*time.Second || p.Default.Overload.String() != "429,503" || p.LatencyBackoff != 0 {
		t.Errorf("defaults: concurrency %d, bound %v, overload %s, latency backoff %v; want 0, 30s, 429,503, 0",
			p.Concurrency, p.ConcurrencyBound, p.Default.Overload, p.LatencyBackoff)
	}
	cfg, err = relayConfigOf(t, "--http-nav-concurrency", "2", "--http-nav-concurrency-bound", "10s", "--overload-status", "403,429,503", "--latency-backoff", "3",
		"--rule", "*.slow.test=fixed:1s,concurrency:1")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.policy; p.Concurrency != 2 || p.ConcurrencyBound != 10*time.Second || p.Default.Overload.String() != "403,429,503" || p.LatencyBackoff != 3 ||
		p.Rules[0].Concurrency != 1 || p.Rules[0].Setting.Overload.String() != "403,429,503" {
		t.Errorf("flags: got %+v", p)
	}
	t.Setenv("CDP_THROTTLE_HTTP_NAV_CONCURRENCY", "4")
	t.Setenv("CDP_THROTTLE_OVERLOAD_STATUS", "none")
	if cfg, err = relayConfigOf(t); err != nil || cfg.policy.Concurrency != 4 || cfg.policy.Default.Overload.String() != "" {
		t.Errorf("environment: got concurrency %d, overload %q, %v; want 4, none", cfg.policy.Concurrency, cfg.policy.Default.Overload, err)
	}
	cfg, err = relayConfigOf(t, "--overload-header", "cf-mitigated=challenge", "--overload-header", "x-overloaded", "--retry-after-max", "10m",
		"--rule", "*.cdn.test=overload-header:cf-mitigated,retry-after-max:1h")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.policy; p.Default.OverloadHeaders.String() != "cf-mitigated=challenge,x-overloaded" || p.Default.RetryAfterMax != 10*time.Minute ||
		p.Rules[0].Setting.OverloadHeaders.String() != "cf-mitigated" || p.Rules[0].Setting.RetryAfterMax != time.Hour {
		t.Errorf("overload headers and Retry-After max: got %q, %v; rule %q, %v", p.Default.OverloadHeaders, p.Default.RetryAfterMax,
			p.Rules[0].Setting.OverloadHeaders, p.Rules[0].Setting.RetryAfterMax)
	}
	if cfg, err = relayConfigOf(t); err != nil || cfg.policy.Default.RetryAfterMax != 0 || cfg.policy.Default.OverloadHeaders.String() != "" {
		t.Errorf("defaults: got Retry-After max %v, overload headers %q, %v; want the limiter's 60 s, none", cfg.policy.Default.RetryAfterMax, cfg.policy.Default.OverloadHeaders, err)
	}
	if cfg, err = relayConfigOf(t); err != nil || cfg.policy.Default.IgnoreServer {
		t.Errorf("defaults: got --ratelimit-headers ignore, %v; want obey", err)
	}
	if cfg, err = relayConfigOf(t, "--ratelimit-headers", "ignore", "--rule", "*.api.test=ratelimit-headers:obey"); err != nil ||
		!cfg.policy.Default.IgnoreServer || cfg.policy.Rules[0].Setting.IgnoreServer {
		t.Errorf("--ratelimit-headers ignore: got ignore %v, the rule's %v, %v; want true, false", cfg.policy.Default.IgnoreServer, cfg.policy.Rules[0].Setting.IgnoreServer, err)
	}
	if _, err = relayConfigOf(t, "--ratelimit-headers", "sometimes"); err == nil || !strings.Contains(err.Error(), `--ratelimit-headers "sometimes": want obey`) {
		t.Errorf("--ratelimit-headers sometimes: got %v, want an error naming the flag", err)
	}
	t.Setenv("CDP_THROTTLE_OVERLOAD_HEADER", "cf-mitigated=challenge\nx-overloaded")
	t.Setenv("CDP_THROTTLE_RETRY_AFTER_MAX", "90s")
	if cfg, err = relayConfigOf(t); err != nil || cfg.policy.Default.RetryAfterMax != 90*time.Second || cfg.policy.Default.OverloadHeaders.String() != "cf-mitigated=challenge,x-overloaded" {
		t.Errorf("environment: got Retry-After max %v, overload headers %q, %v; want 90s, cf-mitigated=challenge,x-overloaded", cfg.policy.Default.RetryAfterMax, cfg.policy.Default.OverloadHeaders, err)
	}
	for _, bad := range [][]string{
		{"--retry-after-max", "2h"},
		{"--retry-after-max", "500ms"},
		{"--overload-header", "cf mitigated"},
		{"--overload-header", "x="},
		{"--rule", "a.test=fixed:1s,overload-header:x"},
		{"--http-nav-concurrency", "-2"},
		{"--overload-status", "soon"},
		{"--latency-backoff", "0.5"},
		{"--rule", "a.test=concurrency:many"},
		{"--jitter", "1"},
		{"--jitter", "-0.5"},
		{"--rule", "a.test=jitter:1.5"},
	} {
		if _, err := relayConfigOf(t, bad...); err == nil || !strings.HasPrefix(err.Error(), bad[0]) {
			t.Errorf("%q: got %v, want an error naming %s", bad, err, bad[0])
		}
	}
}

// TestJitterFlag: --jitter, from the flag or the environment, reaches the
// limiter's setting and the rules that start from it; a rule's jitter:F
// is its own; the default is none.
func TestJitterFlag(t *testing.T) {
	cfg, err := relayConfigOf(t)
	if err != nil || cfg.policy.Default.Jitter != 0 {
		t.Fatalf("default: got jitter %v, %v; want 0", cfg.policy.Default.Jitter, err)
	}
	cfg, err = relayConfigOf(t, "--jitter", "0.5", "--http-nav-delay", "200ms", "--rule", "a.test=fixed:1s", "--rule", "b.test=jitter:0.2")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.policy; p.Default.Jitter != 0.5 || p.Rules[0].Setting.Jitter != 0.5 || p.Rules[1].Setting.Jitter != 0.2 {
		t.Errorf("flags: got jitter %v, rules %v and %v; want 0.5, 0.5, 0.2", p.Default.Jitter, p.Rules[0].Setting.Jitter, p.Rules[1].Setting.Jitter)
	}
	t.Setenv("CDP_THROTTLE_JITTER", "0.25")
	if cfg, err = relayConfigOf(t); err != nil || cfg.policy.Default.Jitter != 0.25 {
		t.Errorf("environment: got jitter %v, %v; want 0.25", cfg.policy.Default.Jitter, err)
	}
}

// TestSharingFlags checks --orphan-timeout and --allow-browser-close reach
// the relay, from the flag or the environment: 0 keeps what clients leave.
func TestSharingFlags(t *testing.T) {
	tests := []struct {
		args      []string
		env       map[string]string
		want      time.Duration
		wantAllow bool
		wantErr   string
	}{
		{want: relay.DefaultOrphanTimeout},
		{args: []string{"--orphan-timeout", "5s"}, want: 5 * time.Second},
		{args: []string{"--orphan-timeout", "1500"}, want: 1500 * time.Millisecond},
		{args: []string{"--orphan-timeout", "0"}, want: -1},
		{env: map[string]string{"CDP_THROTTLE_ORPHAN_TIMEOUT": "2m", "CDP_THROTTLE_ALLOW_BROWSER_CLOSE": "true"}, want: 2 * time.Minute, wantAllow: true},
		{args: []string{"--allow-browser-close"}, want: relay.DefaultOrphanTimeout, wantAllow: true},
		{args: []string{"--orphan-timeout", "soon"}, wantErr: `--orphan-timeout "soon"`},
		{args: []string{"--orphan-timeout", "-5s"}, wantErr: `--orphan-timeout "-5s"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := relayConfigOf(t, tt.args...)
			if tt.wantErr != "" {
				var ue cmdline.UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got %v, want a usage error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || cfg.proxy.OrphanTimeout != tt.want || cfg.proxy.AllowBrowserClose != tt.wantAllow {
				t.Errorf("got orphan timeout %v, allow %v, %v; want %v, %v", cfg.proxy.OrphanTimeout, cfg.proxy.AllowBrowserClose, err, tt.want, tt.wantAllow)
			}
		})
	}
}

func TestAdmissionFlags(t *testing.T) {
	cfg, err := relayConfigOf(t, "--max-clients", "100", "--clients-per-browser", "8", "--queue", "50", "--queue-timeout", "90s")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.proxy; p.MaxClients != 100 || p.ClientsPerBrowser != 8 || p.Queue != 50 || p.QueueTimeout != 90*time.Second {
		t.Errorf("got max %d, per browser %d, queue %d, timeout %v; want 100, 8, 50, 90s", p.MaxClients, p.ClientsPerBrowser, p.Queue, p.QueueTimeout)
	}
	cfg, _ = relayConfigOf(t)
	if p := cfg.proxy; p.MaxClients != 0 || p.ClientsPerBrowser != 0 || p.Queue != 0 || p.QueueTimeout != 60*time.Second {
		t.Errorf("defaults: max %d, per browser %d, queue %d, timeout %v; want 0, 0, 0, 60s", p.MaxClients, p.ClientsPerBrowser, p.Queue, p.QueueTimeout)
	}
	for _, args := range [][]string{{"--queue", "-1"}, {"--max-clients", "-2"}, {"--clients-per-browser", "x"}, {"--queue-timeout", "0"}} {
		var ue cmdline.UsageError
		if _, err := relayConfigOf(t, args...); !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}

// TestBucketIPFlags: --bucket ip reads the started browser's
// --host-resolver-rules, and a browser behind a proxy takes its
// addresses from the resolver unless --bucket-ip-source says otherwise.
func TestBucketIPFlags(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		source string
		rules  bool
		note   string // a part of the log's note, "" for none
	}{
		{"default", []string{"--bucket", "ip"}, "both", false, ""},
		{"the browser's rules", []string{"--bucket", "ip", "--", "chromium", "--remote-debugging-port=0", "--host-resolver-rules=MAP *.test 127.0.0.2"}, "both", true, ""},
		{"a proxy", []string{"--bucket", "ip", "--", "chromium", "--remote-debugging-port=0", "--proxy-server=http://10.0.0.1:3128"}, "resolver", false, "resolver only"},
		{"Lightpanda's proxy", []string{"--bucket", "ip", "--", "lightpanda", "serve", "--http-proxy", "http://10.0.0.1:3128"}, "resolver", false, "resolver only"},
		{"an older Lightpanda's proxy", []string{"--bucket", "ip", "--", "lightpanda", "serve", "--http_proxy=http://10.0.0.1:3128"}, "resolver", false, "resolver only"},
		{"a proxy, browser asked for", []string{"--bucket", "ip", "--bucket-ip-source", "browser", "--", "chromium", "--remote-debugging-port=0", "--proxy-server=http://p:1"}, "browser", false, "shares one schedule"},
		{"a proxy, resolver asked for", []string{"--bucket", "ip", "--bucket-ip-source", "resolver", "--", "chromium", "--remote-debugging-port=0", "--proxy-server=http://p:1"}, "resolver", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := relayConfigOf(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			a := cfg.policy.Addrs
			if a == nil || a.Source.String() != tt.source || (a.Rules != nil) != tt.rules {
				t.Fatalf("got %+v; want source %s, rules %v", a, tt.source, tt.rules)
			}
			if tt.note == "" && cfg.ipNote != "" || !strings.Contains(cfg.ipNote, tt.note) {
				t.Errorf("note: got %q, want one with %q", cfg.ipNote, tt.note)
			}
			if tt.rules {
				if got := cfg.policy.Addrs; got.Rules == nil {
					t.Fatal("no rules")
				}
				if to, ok := cfg.policy.Addrs.Rules.Map("a.test"); !ok || to != "127.0.0.2" {
					t.Errorf("a.test: got %q, %v; want 127.0.0.2", to, ok)
				}
			}
		})
	}
	t.Run("a proxy in the environment", func(t *testing.T) {
		t.Setenv("https_proxy", "http://10.0.0.1:3128")
		cfg, err := relayConfigOf(t, "--bucket", "ip", "--", "chromium", "--remote-debugging-port=0")
		if err != nil || cfg.policy.Addrs.Source.String() != "resolver" || !strings.Contains(cfg.ipNote, "$https_proxy") {
			t.Errorf("got %v, source %v, note %q; want resolver, a note naming $https_proxy", err, cfg.policy.Addrs.Source, cfg.ipNote)
		}
	})
	if _, err := relayConfigOf(t, "--bucket", "ip", "--", "chromium", "--remote-debugging-port=0", "--host-resolver-rules=REWRITE x"); err == nil || !strings.Contains(err.Error(), "--host-resolver-rules") {
		t.Errorf("bad browser rules: got %v, want an error naming --host-resolver-rules", err)
	}
	if _, err := relayConfigOf(t, "--bucket-ip-source", "resolver"); err == nil || !strings.Contains(err.Error(), "needs --bucket ip") {
		t.Errorf("--bucket-ip-source alone: got %v, want needs --bucket ip", err)
	}
	if _, _, err := runCLI(t, "simulate", "--bucket", "ip"); err == nil || !strings.Contains(err.Error(), "--bucket ip") {
		t.Errorf("simulate --bucket ip: got %v, want a refusal", err)
	}
}
