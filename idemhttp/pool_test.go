package idemhttp_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/memstore"
)

// TestReplaysOwnTheirBytes: the buffers that record a response are reused
// by later requests, so a stored result must not share them. Responses of
// decreasing size and with different headers, replayed after all of them
// ran, each come back exactly as first sent.
func TestReplaysOwnTheirBytes(t *testing.T) {
	mem, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, newMiddleware(t, newEngine(t, mem, nil), nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Header.Get("X-N")
		if n != "0" {
			w.Header().Set("ETag", `"`+n+`"`)
		}
		w.Header().Set("Content-Type", "text/plain; n="+n)
		w.Write([]byte(strings.Repeat(n, 100-len(n)*10)))
	})))
	const n = 8
	first := make([]response, n)
	for i := range n {
		c := call{key: fmt.Sprint("k", i), header: map[string]string{"X-N": fmt.Sprint(i)}}
		first[i] = c.send(t, srv)
	}
	for i := range n {
		c := call{key: fmt.Sprint("k", i), header: map[string]string{"X-N": fmt.Sprint(i)}}
		got := c.send(t, srv)
		if got.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("request %d was not replayed", i)
		}
		if string(got.body) != string(first[i].body) || got.header.Get("ETag") != first[i].header.Get("ETag") ||
			got.header.Get("Content-Type") != first[i].header.Get("Content-Type") {
			t.Errorf("replay %d: body %q ETag %q Content-Type %q, first sent %q %q %q", i, got.body, got.header.Get("ETag"),
				got.header.Get("Content-Type"), first[i].body, first[i].header.Get("ETag"), first[i].header.Get("Content-Type"))
		}
	}
}
