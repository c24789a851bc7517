package resolve

import "strings"

// FitBrowser fits the cache to a browser from its command line (the
// switches it was started with, its program first or not): its
// --host-resolver-rules (or --host-rules), unless Rules are set already,
// map names for the cache as for the browser, so a name mapped there is
// on its address from its first navigation; a browser behind a proxy
// (Chromium's --proxy-server or --proxy-pac-url, Lightpanda's --http-proxy
// or --http_proxy) connects to the proxy for every host, so unless
// SourceSet (the user chose the source) addresses then come from the
// resolver alone. env, when set, is how the browser's environment is read
// (os.Getenv for a browser the relay starts, which inherits its own; nil
// for one it does not): an http_proxy, https_proxy or all_proxy there is
// a proxy too. note says what a proxy made of the source, for the log; ""
// when nothing. Call it before the cache's first use.
func (c *Cache) FitBrowser(args []string, env func(string) string) (note string, err error) {
	if env != nil {
		for _, v := range []string{"https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"} {
			if env(v) != "" {
				args = append(args[:len(args):len(args)], "$"+v)
				break
			}
		}
	}
	rulesSet := c.Rules != nil
	for _, arg := range args {
		name, value, _ := strings.Cut(arg, "=")
		switch name {
		case "--host-resolver-rules", "--host-rules":
			if rulesSet || c.Rules != nil && name == "--host-rules" {
				continue // --host-resolver-rules wins
			}
			rules, err := ParseRules(value)
			if err != nil {
				return "", err
			}
			c.Rules = rules
		case "--proxy-server", "--proxy-pac-url", "--http-proxy", "--http_proxy",
			"$https_proxy", "$HTTPS_PROXY", "$http_proxy", "$HTTP_PROXY", "$all_proxy", "$ALL_PROXY":
			switch {
			case !c.SourceSet:
				c.Source = Resolver
				note = "the browser connects through a proxy (" + name + "): --bucket ip takes addresses from the resolver only"
			case c.Source != Resolver:
				note = "the browser connects through a proxy (" + name + "), and --bucket-ip-source " + c.Source.String() +
					" learns its address for every host: every host it answers for shares one schedule; --bucket-ip-source resolver avoids it"
			}
		}
	}
	return note, nil
}
