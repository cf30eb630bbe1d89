package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/api"
)

func dashboardGet(t *testing.T, h http.Handler, method, target string, header ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	for k := 0; k+1 < len(header); k += 2 {
		r.Header.Set(header[k], header[k+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func readBody(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assetRefs are the ui/ files that index.html asks for, with their ?v= fingerprints.
var assetRefs = regexp.MustCompile(`(?:src|href)="(ui/[^"?]+)\?v=([0-9a-f]+)"`)

func TestDashboardServesPageAndAssets(t *testing.T) {
	h := api.Dashboard()

	res := dashboardGet(t, h, "GET", "/")
	page := readBody(t, res)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for k, want := range map[string]string{
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
		"X-Frame-Options":        "DENY",
		"Referrer-Policy":        "no-referrer",
	} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("GET /: %s %q, want %q", k, got, want)
		}
	}
	csp := res.Header.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, d+";") && !strings.HasSuffix(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Errorf("CSP %q allows unsafe sources", csp)
	}
	if res := dashboardGet(t, h, "GET", "/index.html"); res.StatusCode != 200 {
		t.Errorf("GET /index.html: %d", res.StatusCode)
	}

	types := map[string]string{
		"ui/app.js":       "text/javascript; charset=utf-8",
		"ui/style.css":    "text/css; charset=utf-8",
		"ui/icon.svg":     "image/svg+xml",
		"ui/statuses.js":  "text/javascript; charset=utf-8",
		"ui/statuses.css": "text/css; charset=utf-8",
	}
	refs := assetRefs.FindAllStringSubmatch(page, -1)
	seen := map[string]bool{}
	for _, m := range refs {
		path, version := m[1], m[2]
		seen[path] = true
		res := dashboardGet(t, h, "GET", "/"+path+"?v="+version)
		body := readBody(t, res)
		if res.StatusCode != 200 || body == "" {
			t.Errorf("GET /%s: %d, %d bytes", path, res.StatusCode, len(body))
			continue
		}
		if want := types[path]; res.Header.Get("Content-Type") != want {
			t.Errorf("GET /%s: Content-Type %q, want %q", path, res.Header.Get("Content-Type"), want)
		}
		if got := res.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
			t.Errorf("GET /%s?v=<current>: Cache-Control %q, want immutable", path, got)
		}
		etag := res.Header.Get("ETag")
		if etag == "" || res.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET /%s: ETag %q, CSP %q", path, etag, res.Header.Get("Content-Security-Policy"))
		}
		if res := dashboardGet(t, h, "GET", "/"+path+"?v="+version, "If-None-Match", etag); res.StatusCode != http.StatusNotModified {
			t.Errorf("GET /%s with its ETag: %d, want 304", path, res.StatusCode)
		}
		// An old or missing fingerprint is served, but revalidated.
		if res := dashboardGet(t, h, "GET", "/"+path+"?v=0ld"); res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET /%s?v=0ld: %d, Cache-Control %q", path, res.StatusCode, res.Header.Get("Cache-Control"))
		}
	}
	for path := range types {
		if !seen[path] {
			t.Errorf("index.html does not ask for %s with a fingerprint (refs %q)", path, refs)
		}
	}

	head := dashboardGet(t, h, "HEAD", "/")
	if body := readBody(t, head); head.StatusCode != 200 || body != "" {
		t.Errorf("HEAD /: %d with %d bytes", head.StatusCode, len(body))
	}
	for _, p := range []string{"/ui/nope.js", "/ui/", "/favicon.ico", "/v2/queues", "/dashboard/../go.mod"} {
		res := dashboardGet(t, h, "GET", p)
		if body := readBody(t, res); res.StatusCode != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Errorf("GET %s: %d %s, want a JSON 404", p, res.StatusCode, body)
		}
	}
	post := dashboardGet(t, h, "POST", "/")
	if post.StatusCode != http.StatusMethodNotAllowed || post.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", post.StatusCode, post.Header.Get("Allow"))
	}
}

// TestDashboardPageIsCSPClean checks the sources follow the rules the CSP enforces (no inline
// script, style or event handler) and the app never parses strings as HTML or code: job data
// is untrusted.
func TestDashboardPageIsCSPClean(t *testing.T) {
	h := api.Dashboard()
	page := readBody(t, dashboardGet(t, h, "GET", "/"))
	if m := regexp.MustCompile(`<script(?:\s[^>]*)?>`).FindAllString(page, -1); len(m) == 0 {
		t.Error("index.html has no script")
	} else {
		for _, tag := range m {
			if !strings.Contains(tag, ` src="`) {
				t.Errorf("index.html has an inline script: %s", tag)
			}
		}
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\son[a-z]+\s*=`), // event handler attributes
		regexp.MustCompile(`(?i)\sstyle\s*=`),    // style attributes
		regexp.MustCompile(`(?i)<style`),         // style elements
		regexp.MustCompile(`(?i)javascript:`),    // script URLs
		regexp.MustCompile(`(?i)https?://`),      // anything from elsewhere
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("index.html has %q", m)
		}
	}
	ref := assetRefs.FindAllStringSubmatch(page, -1)
	var js string
	for _, m := range ref {
		if m[1] == "ui/app.js" {
			js = readBody(t, dashboardGet(t, h, "GET", "/ui/app.js?v="+m[2]))
		}
	}
	if js == "" {
		t.Fatal("no app.js")
	}
	js = strings.ReplaceAll(js, "'http://www.w3.org/2000/svg'", "SVGNS") // a name, not a fetch
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", "fetch('http", "://"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %q", bad)
		}
	}
	if !strings.Contains(js, `'X-Conveyor-Request': '1'`) {
		t.Error("app.js does not send X-Conveyor-Request: 1")
	}
}
