package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
)

//go:embed page/index.html page/style.css page/app.js
var files embed.FS

// page is the page as served: index.html with style.css and app.js put
// inline, so that it is one response (a token in its address covers it
// all), and the Content-Security-Policy that lets it run that script and
// style and reach nothing but its own origin.
var page = assemble()

type assembled struct {
	html []byte
	csp  string
}

func assemble() assembled {
	read := func(name string) []byte {
		b, err := files.ReadFile("page/" + name)
		if err != nil {
			panic("dashboard: " + err.Error()) // embedded: cannot happen
		}
		return b
	}
	html, css, js := read("index.html"), read("style.css"), read("app.js")
	for _, part := range []struct{ marker, open, body, close string }{
		{"<!--style.css-->", "<style>", string(css), "</style>"},
		{"<!--app.js-->", "<script>", string(js), "</script>"},
	} {
		if bytes.Count(html, []byte(part.marker)) != 1 {
			panic("dashboard: index.html must hold " + part.marker + " once")
		}
		html = bytes.Replace(html, []byte(part.marker), []byte(part.open+part.body+part.close), 1)
	}
	hash := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return assembled{
		html: html,
		csp: "default-src 'none'; script-src " + hash(js) + "; style-src " + hash(css) +
			"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	}
}
