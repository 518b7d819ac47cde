package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// files returns every embedded file by its path under static/.
func files(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, path)
		out[strings.TrimPrefix(path, "static/")] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The rules that keep data inert and the page self-contained, checked on
// the files themselves: the browser test shows they hold for one hostile
// key; these show no code path builds HTML from strings at all.
func TestFilesBuildThePageWithTheDOMOnly(t *testing.T) {
	forbidden := map[string]*regexp.Regexp{
		"HTML from a string":        regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment|DOMParser|srcdoc`),
		"code from a string":        regexp.MustCompile(`\beval\s*\(|new\s+Function\s*\(|setTimeout\s*\(\s*['"\x60]|setInterval\s*\(\s*['"\x60]`),
		"an inline style":           regexp.MustCompile(`\.style\b|['"]style['"]`),
		"a javascript: URL":         regexp.MustCompile(`(?i)javascript:`),
		"an address elsewhere":      regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`),
		"storage that outlives tab": regexp.MustCompile(`localStorage|document\.cookie|indexedDB`),
	}
	all := files(t)
	for name, text := range all {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		for why, re := range forbidden {
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				if m := re.FindString(line); m != "" && !(why == "an address elsewhere" && m == "http://www.w3.org") {
					t.Errorf("%s: %s (%q) in %q", name, why, m, strings.TrimSpace(line))
				}
			}
		}
		for _, m := range regexp.MustCompile(`from '\./([\w.-]+)'`).FindAllStringSubmatch(text, -1) {
			if _, ok := all["js/"+m[1]]; !ok {
				t.Errorf("%s imports ./%s, which is not embedded", name, m[1])
			}
		}
	}
	html := all["index.html"]
	for _, m := range regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`).FindAllStringSubmatch(html, -1) {
		if !strings.Contains(m[1], " src=") || strings.TrimSpace(m[2]) != "" {
			t.Errorf("index.html has an inline script: %q", m[0])
		}
	}
	for why, re := range map[string]*regexp.Regexp{
		"an event attribute": regexp.MustCompile(`(?i)\son[a-z]+\s*=`),
		"a style attribute":  regexp.MustCompile(`(?i)\sstyle\s*=|<style`),
		"a remote resource":  regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`),
	} {
		if m := re.FindString(html); m != "" {
			t.Errorf("index.html has %s: %q", why, m)
		}
	}
	for _, css := range []string{all["console.css"]} {
		if m := regexp.MustCompile(`@import|url\(`).FindString(css); m != "" {
			t.Errorf("console.css loads something: %q", m)
		}
	}
}

func TestHandlerHeaders(t *testing.T) {
	for path, wantType := range map[string]string{
		"/ui/":              "text/html; charset=utf-8",
		"/ui/js/main.js":    "text/javascript; charset=utf-8",
		"/ui/console.css":   "text/css; charset=utf-8",
		"/ui/favicon.svg":   "image/svg+xml",
		"/ui/js/nothing.js": "",
	} {
		rec := httptest.NewRecorder()
		Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		h := rec.Header()
		if h.Get("Content-Security-Policy") != ContentSecurityPolicy || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v; want the CSP, nosniff and DENY", path, h)
		}
		switch {
		case wantType == "" && rec.Code != http.StatusNotFound:
			t.Errorf("GET %s = %d; want 404", path, rec.Code)
		case wantType != "" && (rec.Code != http.StatusOK || h.Get("Content-Type") != wantType):
			t.Errorf("GET %s = %d %s; want 200 %s", path, rec.Code, h.Get("Content-Type"), wantType)
		}
	}
	for _, directive := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, directive) {
			t.Errorf("the CSP lacks %s", directive)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Errorf("the CSP allows something unsafe: %s", ContentSecurityPolicy)
	}
}
