//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/launcher"
)

// Lightpanda comes from PyPI (lightpanda==1.0.2, `make lightpanda`) into
// the repository's .venv, or from $LIGHTPANDA. The tests that need it fail
// without it, never skip: CI installs it.
var lightpanda struct {
	once sync.Once
	bin  string
	err  error
}

// lightpandaBin returns the Lightpanda binary, failing the test without one.
func lightpandaBin(t testing.TB) string {
	t.Helper()
	lightpanda.once.Do(func() { lightpanda.bin, lightpanda.err = findLightpanda() })
	if lightpanda.err != nil {
		t.Fatal(lightpanda.err)
	}
	return lightpanda.bin
}

// findLightpanda asks the PyPI package where its bundled binary is.
func findLightpanda() (string, error) {
	if p := os.Getenv("LIGHTPANDA"); p != "" {
		return p, nil
	}
	py := venvPython
	out, err := exec.Command(py, "-c", "from lightpanda.client import find_binary; print(find_binary())").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("no Lightpanda: run `make lightpanda` at the repository root (lightpanda==1.0.2 from PyPI into .venv), or set LIGHTPANDA to its binary: %s: %v: %s",
			py, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// startLightpanda starts `lightpanda serve` on a port of its choosing, with
// extra flags, and returns its http://127.0.0.1:PORT; it is stopped when
// the test ends. Its own navigation limiter is off unless extra sets it.
func startLightpanda(t testing.TB, extra ...string) string {
	t.Helper()
	argv := append([]string{lightpandaBin(t), "serve", "--host", "127.0.0.1", "--port", "0"}, extra...)
	b, err := launcher.Start(argv, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := b.Endpoint(ctx)
	if err != nil {
		t.Fatalf("lightpanda serve: %v", err)
	}
	return ep
}

// TestLightpandaInstalled checks the Lightpanda the tests use is the pinned
// one, and that it serves CDP where it says.
func TestLightpandaInstalled(t *testing.T) {
	out, err := exec.Command(lightpandaBin(t), "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1.0.2" {
		t.Errorf("lightpanda version: %q, %v; want 1.0.2 (the Makefile's pin)", out, err)
	}
	ep := startLightpanda(t)
	body, err := httpGet(ep + "/json/version")
	if err != nil || !strings.Contains(string(body), `"Lightpanda-Version": "1.0.2"`) {
		t.Errorf("%s/json/version: %v: %s", ep, err, body)
	}
}
