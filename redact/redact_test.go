package redact

import (
	"strings"
	"testing"
)

// TestRedactArgs checks what the log shows of a launched browser's command.
func TestRedactArgs(t *testing.T) {
	got := Args([]string{"chromium", "--proxy-server=http://user:pw@proxy:3128", "--remote-debugging-port=9222",
		"https://user:pw@site.example/start?token=abc", "--headless"})
	want := []string{"chromium", "--proxy-server=http://proxy:3128", "--remote-debugging-port=9222",
		"https://site.example/start?redacted", "--headless"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
}
