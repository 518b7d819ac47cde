package gateway

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"net/url"
	"strings"
	"testing"
)

// Issue 22, item 8: a --reconcile-url that New refuses is quoted without
// its password, as --upstream is.
func TestReconcileURLPasswordRedacted(t *testing.T) {
	const secret = "hunter2"
	up, _ := url.Parse("http://127.0.0.1:1")
	for _, bad := range []string{
		"http://user:" + secret + "@host/lookup",          // no {key}
		"ftp://user:" + secret + "@host/lookup/{key}",     // not http
		"http://user:" + secret + "@[::1/lookup/{key}",    // does not parse
		"http://user:" + secret + "@h:p%zz/lookup/{key}",  // does not parse
		"https://user:" + secret + "@/lookup/{key}?x=%zz", // no host
	} {
		_, err := New(Config{Upstream: up, Store: newMemStore(t), ReconcileURL: bad})
		if err == nil {
			t.Errorf("New(--reconcile-url %q) succeeded", bad)
			continue
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "--reconcile-url") {
			t.Errorf("New(--reconcile-url %q) = %v; want an error about --reconcile-url without the password", bad, err)
		}
	}
}

func newMemStore(t *testing.T) idem.Store {
	t.Helper()
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
