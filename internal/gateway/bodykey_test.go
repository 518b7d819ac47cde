package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// lenientUpstream is an upstream that reads its key as many do: the body
// decoded as JSON whatever its Content-Type, a byte order mark skipped
// (Express's body-parser), into a struct (Go's encoding/json: names
// matched without case, the last of two taken, data after the value
// ignored). It counts its runs by the request_id it read.
type lenientUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	runs map[string]int
}

func newLenientUpstream(t *testing.T) *lenientUpstream {
	u := &lenientUpstream{runs: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var v struct {
			RequestID string `json:"request_id"`
		}
		json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(b, []byte("\uFEFF")))).Decode(&v)
		u.mu.Lock()
		u.runs[v.RequestID]++
		u.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *lenientUpstream) count(id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[id]
}

// postBody sends body to srv's path with the Content-Type headers given
// (none when there are none) and the Idempotency-Key header when key is
// not empty.
func postBody(t *testing.T, srv *httptest.Server, path, key string, body []byte, contentType ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(contentType) > 0 {
		req.Header["Content-Type"] = contentType
	}
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get(idemhttp.HeaderReplayed) == "true", body: string(b)}
	if i := strings.Index(r.body, `"code":"`); i >= 0 {
		r.code, _, _ = strings.Cut(r.body[i+8:], `"`)
	}
	return r
}

func bodyKeyServer(t *testing.T, up *lenientUpstream, routes ...Route) *httptest.Server {
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), AllowAnonymous: true, Routes: routes})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return srv
}

var ordersByBody = Route{Pattern: "POST /v1/orders", KeyFrom: "json:/request_id"}

// A member on the key's path named in another case: Go's encoding/json
// reads {"Request_Id":"ci1"} as request_id ci1, and the last of
// request_id and REQUEST_ID. The gateway saw no key (or the first), and
// the upstream ran the order on each send. Now it is refused, as a
// member named twice is.
func TestBodyKeyInAnotherCase(t *testing.T) {
	up := newLenientUpstream(t)
	srv := bodyKeyServer(t, up, ordersByBody, Route{Pattern: "POST /v1/meta", KeyFrom: "json:/meta/request_id"})
	for _, c := range []struct{ path, body, id string }{
		{"/v1/orders", `{"Request_Id":"ci1","amount":1}`, "ci1"},
		{"/v1/orders", `{"REQUEST_ID":"ci2"}`, "ci2"},
		{"/v1/orders", `{"request_id":"ci3a","REQUEST_ID":"ci3"}`, "ci3"},
		{"/v1/orders", `{"request_\u0131d":"ci4"}`, "ci4"}, // Go folds ı to I
		{"/v1/meta", `{"Meta":{"request_id":"ci5"}}`, ""},
	} {
		for i := range 2 {
			if got := postBody(t, srv, c.path, "", []byte(c.body), "application/json"); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyInvalid {
				t.Errorf("%s, send %d = %d %s; want 400 key_invalid", c.body, i+1, got.status, got.body)
			}
		}
		if n := up.count(c.id); n != 0 {
			t.Errorf("%s ran %d times upstream; want none", c.body, n)
		}
	}
}

// A route's fingerprint by fields does not read a member in another
// case, which the upstream takes for the field: with only /amount,
// {"Amount":5} and {"Amount":6} were both {} to it, and the second order
// was answered with the first's replay. The body now counts whole.
func TestFingerprintFieldInAnotherCase(t *testing.T) {
	up := newLenientUpstream(t)
	srv := bodyKeyServer(t, up, Route{Pattern: "POST /v1/payouts", Fingerprint: FingerprintRule{Only: []string{"/amount"}}})
	if got := postBody(t, srv, "/v1/payouts", "p1", []byte(`{"Amount":5}`), "application/json"); got.status != http.StatusCreated {
		t.Fatalf("a payout = %d %s", got.status, got.body)
	}
	if got := postBody(t, srv, "/v1/payouts", "p1", []byte(`{"Amount":6}`), "application/json"); got.status != http.StatusUnprocessableEntity || got.code != idemhttp.CodeKeyMismatch {
		t.Fatalf("another amount under the key = %d (replayed %v) %s; want 422 key_mismatch", got.status, got.replayed, got.body)
	}
	if got := postBody(t, srv, "/v1/payouts", "p1", []byte(`{"Amount":5}`), "application/json"); got.status != http.StatusCreated || !got.replayed {
		t.Fatalf("the retry = %d (replayed %v) %s; want the replay", got.status, got.replayed, got.body)
	}
}

// A body that is not valid JSON, but that a lenient reader reads as an
// object with the key: data after the value (Go's json.Decoder), a byte
// order mark (Express, System.Text.Json), comments and the like
// (Json.NET). The gateway saw no key and forwarded each send unprotected.
// Now it is refused. A body no JSON reader takes for one (a form, text)
// still has no key, as before.
func TestBodyKeyFromALenientReading(t *testing.T) {
	up := newLenientUpstream(t)
	srv := bodyKeyServer(t, up, ordersByBody)
	utf16 := func(s string) []byte {
		b := []byte{0xFF, 0xFE}
		for _, c := range []byte(s) {
			b = append(b, c, 0)
		}
		return b
	}
	for _, c := range []struct {
		name string
		body []byte
		id   string
	}{
		{"data after the value", []byte(`{"request_id":"x1"} trailing`), "x1"},
		{"a second value", []byte(`{"request_id":"x2"}{"request_id":"x2b"}`), "x2"},
		{"a first value that is not an object", []byte(`"s" {"request_id":"x3"}`), ""},
		{"a byte order mark", []byte("\uFEFF" + `{"request_id":"x4"}`), "x4"},
		{"a comment", []byte(`/* c */ {"request_id":"x5"}`), ""},
		{"a trailing comma", []byte(`{"request_id":"x6",}`), ""},
		{"NaN", []byte(`{"request_id":"x7","amount":NaN}`), ""},
		{"UTF-16", utf16(`{"request_id":"x8"}`), ""},
		{"a truncated object (the safe side)", []byte(`{"request_id":"x9"`), ""},
	} {
		for i := range 2 {
			if got := postBody(t, srv, "/v1/orders", "", c.body, "application/json"); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyInvalid {
				t.Errorf("%s, send %d = %d %s; want 400 key_invalid", c.name, i+1, got.status, got.body)
			}
		}
		if c.id != "" && up.count(c.id) != 0 {
			t.Errorf("%s: %s ran %d times upstream; want none", c.name, c.id, up.count(c.id))
		}
	}
	for _, body := range []string{"request_id=f1&amount=1", "hello", ""} {
		for i := range 2 {
			if got := postBody(t, srv, "/v1/orders", "", []byte(body), "application/x-www-form-urlencoded"); got.status != http.StatusCreated || got.replayed {
				t.Errorf("%q, send %d = %d (replayed %v) %s; want 201, forwarded without a key", body, i+1, got.status, got.replayed, got.body)
			}
		}
	}
}

// The key is read from a JSON body whatever its Content-Type: with none,
// text/plain, text/json, application/x-json or a list, it was ignored and
// each send ran at an upstream that decodes the body regardless.
func TestBodyKeyWhateverTheContentType(t *testing.T) {
	up := newLenientUpstream(t)
	srv := bodyKeyServer(t, up, ordersByBody)
	for i, ct := range [][]string{nil, {"text/plain"}, {"text/json"}, {"application/x-json"}, {"application/json, text/plain"},
		{"text/plain", "application/json"}, {"application/x-www-form-urlencoded"}, {"application/json;;"}} {
		id := "ct" + string(rune('a'+i))
		body := []byte(`{"request_id":"` + id + `","amount":1}`)
		for n := range 2 {
			if got := postBody(t, srv, "/v1/orders", "", body, ct...); got.status != http.StatusCreated || got.replayed != (n == 1) {
				t.Errorf("Content-Type %q, send %d = %d (replayed %v) %s; want 201, then its replay", ct, n+1, got.status, got.replayed, got.body)
			}
		}
		if got := postBody(t, srv, "/v1/orders", "", []byte(`{"Request_Id":"`+id+`x"}`), ct...); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyInvalid {
			t.Errorf("Content-Type %q, the key in another case = %d %s; want 400 key_invalid", ct, got.status, got.body)
		}
		if got := postBody(t, srv, "/v1/orders", "", []byte(`{"request_id":"`+id+`y"} x`), ct...); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyInvalid {
			t.Errorf("Content-Type %q, data after the value = %d %s; want 400 key_invalid", ct, got.status, got.body)
		}
		if n := up.count(id); n != 1 {
			t.Errorf("Content-Type %q: the order ran %d times; want once", ct, n)
		}
	}
}
