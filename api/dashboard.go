package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/status"
)

// The dashboard is a single page (index.html) and its assets (ui/...), embedded in the binary.
// It is plain HTML, CSS and JavaScript with no build step. It calls the /v1 JSON API of the same
// origin, with relative URLs. So it works wherever the API is mounted, as long as the page is
// served at the API's root.
//
//go:embed dashboard
var dashboardFiles embed.FS

// dashboardCSP is the dashboard's Content-Security-Policy. Everything comes from the page's own
// origin, and nothing is inline: no inline scripts, style attributes or event handler
// attributes. No plugins, no framing, and forms post nowhere else.
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'"

// dashboardAsset is one embedded file, ready to serve.
type dashboardAsset struct {
	body        []byte
	contentType string
	etag        string // strong ETag: a hash of body
	version     string // short hash, the ?v= that index.html puts on the asset's URL
}

// dashboard serves the embedded files. Assets are fingerprinted: index.html, always revalidated,
// asks for ui/app.js?v=<hash>. A request carrying the current hash may be cached for a year. Any
// other request for an asset is revalidated with its ETag.
type dashboard struct {
	index  dashboardAsset
	assets map[string]dashboardAsset // by URL path below ui/, e.g. "app.js"
}

// Dashboard returns the handler of the embedded web dashboard. GET (and HEAD) of "/" or
// "/index.html" is the page; "/ui/<file>" is its script, style sheet and icon. The page uses the
// JSON API under /v1 on the same origin. It asks for the API token when the API answers 401, and
// keeps it for the browser tab's session. Every response carries a strict
// Content-Security-Policy (no inline script or style) and nosniff. Other paths are 404 and other
// methods 405.
func Dashboard() http.Handler {
	d := &dashboard{assets: map[string]dashboardAsset{}}
	root, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embedded tree always has the directory
	}
	err = fs.WalkDir(root, ".", func(name string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || name == "index.html" {
			return err
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		d.assets[name] = newDashboardAsset(body, name)
		return nil
	})
	if err != nil {
		panic(err)
	}
	d.assets["statuses.js"] = newDashboardAsset(statusesJS(status.Infos(), status.Listable()), "statuses.js")
	d.assets["statuses.css"] = newDashboardAsset(statusesCSS(status.Infos()), "statuses.css")
	index, err := fs.ReadFile(root, "index.html")
	if err != nil {
		panic(err)
	}
	// Point the page at the current version of each asset.
	for name, a := range d.assets {
		ref := []byte(`"ui/` + name + `"`)
		index = bytes.ReplaceAll(index, ref, []byte(`"ui/`+name+`?v=`+a.version+`"`))
	}
	d.index = newDashboardAsset(index, "index.html")
	return d
}

func newDashboardAsset(body []byte, name string) dashboardAsset {
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	ct := mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) { // the system's MIME table may lack or differ on these
	case ".html":
		ct = "text/html; charset=utf-8"
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	case ".svg":
		ct = "image/svg+xml"
	case ".json", ".webmanifest":
		ct = "application/json"
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	return dashboardAsset{body: body, contentType: ct, etag: `"` + h[:32] + `"`, version: h[:12]}
}

func (d *dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")

	var a dashboardAsset
	immutable := false
	switch p := r.URL.Path; {
	case p == "/" || p == "" || p == "/index.html":
		a = d.index
	case strings.HasPrefix(p, "/ui/"):
		var ok bool
		if a, ok = d.assets[strings.TrimPrefix(p, "/ui/")]; !ok {
			dashboardError(w, http.StatusNotFound, "no such file in the dashboard")
			return
		}
		immutable = r.URL.Query().Get("v") == a.version
	default:
		dashboardError(w, http.StatusNotFound, "not found (the dashboard is at /)")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		dashboardError(w, http.StatusMethodNotAllowed, "the dashboard serves GET and HEAD only")
		return
	}
	if immutable {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		// The page and unversioned assets: a browser may keep them but must ask (a 304 with
		// the ETag costs nothing), so a new binary's page shows at once.
		h.Set("Cache-Control", "no-cache")
	}
	h.Set("Content-Type", a.contentType)
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// dashboardError answers with the API's error shape.
func dashboardError(w http.ResponseWriter, status int, msg string) {
	code := "not_found"
	if status == http.StatusMethodNotAllowed {
		code = "method_not_allowed"
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"` + msg + `"}}` + "\n"))
}
