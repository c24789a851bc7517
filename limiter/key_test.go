package limiter

import "testing"

func TestKey(t *testing.T) {
	tests := []struct {
		url    string
		want   string
		wantOK bool
	}{
		{"https://example.com/", "example.com", true},
		{"HTTP://Example.COM:8080/", "example.com", true},
		{"http://example.com./path?q=1#f", "example.com", true},
		{"https://user:secret@Example.com:443/x", "example.com", true},
		{"http://[::1]:9222/json", "[::1]", true},
		{"http://[0:0:0:0:0:0:0:1]/", "[::1]", true},
		{"http://[2001:DB8::1]:80/", "[2001:db8::1]", true},
		{"http://[fe80::1%25eth0]/", "[fe80::1]", true},
		{"http://127.0.0.2:8080/", "127.0.0.2", true},
		{"http://LOCALHOST./", "localhost", true},
		{"https://xn--bcher-kva.example/", "xn--bcher-kva.example", true},
		{"http://a.test:1234", "a.test", true},
		{"http://Bücher.example/", "xn--bcher-kva.example", true},
		{"http://%25/", "", false},
		{"http://exa mple.com/", "", false},
		{"about:blank", "", false},
		{"data:text/html,<p>hi</p>", "", false},
		{"blob:https://example.com/uuid", "", false},
		{"file:///etc/passwd", "", false},
		{"javascript:alert(1)", "", false},
		{"chrome://version", "", false},
		{"ws://example.com/", "", false},
		{"https:example.com", "", false},
		{"http://", "", false},
		{"http://:80/", "", false},
		{"http://[::1/", "", false},
		{"/relative/path", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := Key(tt.url)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Key(%q): got %q, %v, want %q, %v", tt.url, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestExempt(t *testing.T) {
	for _, h := range []string{"localhost", "LocalHost", "127.0.0.1", "[::1]"} {
		if !Exempt(h) {
			t.Errorf("Exempt(%q): got false, want true", h)
		}
	}
	for _, h := range []string{"127.0.0.2", "localhost.example", "[::2]", "example.com", ""} {
		if Exempt(h) {
			t.Errorf("Exempt(%q): got true, want false", h)
		}
	}
}

func FuzzKey(f *testing.F) {
	for _, s := range []string{"https://example.com/", "HTTP://Example.COM:8080/", "http://[::1]:9222/", "about:blank", "http://u:p@h./", "http://[fe80::1%25eth0]/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, ok := Key(s)
		if !ok {
			if h != "" {
				t.Fatalf("Key(%q) = %q, false: want an empty host when not ok", s, h)
			}
			return
		}
		if h == "" {
			t.Fatalf("Key(%q): empty host with ok", s)
		}
		// A key is its own key: normalising twice changes nothing.
		if h2, ok2 := Key("http://" + h + "/"); !ok2 || h2 != h {
			t.Fatalf("Key(%q) = %q, but Key(http://%s/) = %q, %v", s, h, h, h2, ok2)
		}
	})
}
