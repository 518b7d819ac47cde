package gateway

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// An upstream that gzips its answer when the client asks (Go's clients
// ask by default): the gateway passes the gzip bytes on with their
// Content-Encoding, and stores both, so a retry gets the first answer,
// bytes and label. Replayed without Content-Encoding, the gzip bytes were
// a corrupt application/json answer.
func TestGzipAnswerReplayedEncoded(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		t.Run(storeName, func(t *testing.T) {
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := fmt.Sprintf(`{"id":"ch_%d"}`, calls.Add(1)) // a second run would answer otherwise
				w.Header().Set("Content-Type", "application/json")
				if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, body)
					return
				}
				w.Header().Set("Content-Encoding", "gzip")
				w.WriteHeader(http.StatusCreated)
				zw := gzip.NewWriter(w)
				io.WriteString(zw, body)
				zw.Close()
			}))
			defer up.Close()
			g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Store: newStore(t), AllowAnonymous: true})
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()

			// raw sees what the gateway sends: its transport undoes no
			// gzip; plain is a default Go client, which asks for gzip
			// itself and must be able to decode the first answer and the
			// replay alike.
			raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer raw.CloseIdleConnections()
			plain := &http.Client{Transport: &http.Transport{}}
			defer plain.CloseIdleConnections()
			type answer struct {
				status   int
				encoding string
				replayed string
				body     string // decoded
			}
			send := func(c *http.Client, key string, explicit bool) answer {
				t.Helper()
				req, err := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(idemhttp.HeaderKey, key)
				if explicit {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				res, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				a := answer{status: res.StatusCode, encoding: res.Header.Get("Content-Encoding"), replayed: res.Header.Get(idemhttp.HeaderReplayed)}
				var r io.Reader = res.Body
				if a.encoding == "gzip" {
					zr, err := gzip.NewReader(res.Body)
					if err != nil {
						t.Fatalf("Content-Encoding gzip, but the body is not: %v", err)
					}
					r = zr
				}
				b, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				a.body = string(b)
				return a
			}

			key := testenv.Prefix(t) + "raw"
			first := send(raw, key, true)
			if first.status != http.StatusCreated || first.encoding != "gzip" || first.body != `{"id":"ch_1"}` {
				t.Fatalf("first answer %+v; want the upstream's 201, gzip-encoded", first)
			}
			retry := send(raw, key, true)
			if retry.replayed != "true" || retry.status != first.status || retry.encoding != first.encoding || retry.body != first.body {
				t.Errorf("replay %+v; want the first answer %+v", retry, first)
			}

			key = testenv.Prefix(t) + "plain"
			first = send(plain, key, false)
			if first.status != http.StatusCreated || first.body != `{"id":"ch_2"}` {
				t.Fatalf("first answer to a default client %+v; want the upstream's 201, decoded", first)
			}
			retry = send(plain, key, false)
			if retry.replayed != "true" || retry.status != first.status || retry.body != first.body {
				t.Errorf("replay to a default client %+v; want the first answer %+v", retry, first)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("the upstream ran %d times; want once a key", n)
			}
		})
	}
}
