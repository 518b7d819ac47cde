package idemhttp_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/store"
)

// step is one request of a scenario and what it must get.
type step struct {
	call
	status   int
	code     string // a problem response with this code
	body     string // when set, the exact body
	replayed bool
}

// TestStatuses runs every answer of the protocol, in order within each
// scenario, against each store. The handler answers with statuses[n] on
// its n-th call (the last one repeats) and the body "call n: AUTH TENANT".
func TestStatuses(t *testing.T) {
	long := strings.Repeat("k", idem.MaxKeyLength+1)
	tests := []struct {
		name      string
		opts      idemhttp.Options
		statuses  []int
		storeDown bool
		steps     []step
		calls     int64
	}{
		{name: "first runs, retry replays", steps: []step{
			{call: call{key: "k1"}, status: 201, body: "call 1:"},
			{call: call{key: "k1"}, status: 201, body: "call 1:", replayed: true},
			{call: call{key: `"k1"`}, status: 201, body: "call 1:", replayed: true}, // the quoted form of the same key
		}, calls: 1},
		{name: "no key passes through", steps: []step{
			{call: call{}, status: 201, body: "call 1:"},
			{call: call{}, status: 201, body: "call 2:"},
		}, calls: 2},
		{name: "GET and PUT pass through", steps: []step{
			{call: call{method: "GET", key: "k1"}, status: 201, body: "call 1:"},
			{call: call{method: "GET", key: "k1"}, status: 201, body: "call 2:"},
			{call: call{method: "PUT", key: "k1"}, status: 201, body: "call 3:"},
		}, calls: 3},
		{name: "PATCH is protected", steps: []step{
			{call: call{method: "PATCH", key: "k1"}, status: 201, body: "call 1:"},
			{call: call{method: "PATCH", key: "k1"}, status: 201, body: "call 1:", replayed: true},
		}, calls: 1},
		{name: "RequireKey", opts: idemhttp.Options{RequireKey: true}, steps: []step{
			{call: call{}, status: 400, code: idemhttp.CodeKeyRequired},
			{call: call{method: "GET"}, status: 201, body: "call 1:"},
		}, calls: 1},
		{name: "invalid keys", steps: []step{
			{call: call{keys: []string{""}}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{keys: []string{"a", "b"}}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{keys: []string{"a", "a"}}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: long}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: strings.Repeat("x", 64<<10)}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: "a,b"}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: "ключ"}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: `"unterminated`}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: `""`}, status: 400, code: idemhttp.CodeKeyInvalid},
			// A space at either end would not survive as a header value
			// forwarded upstream (parsers trim it), so the key could not
			// mean the same bytes everywhere.
			{call: call{key: `" k1"`}, status: 400, code: idemhttp.CodeKeyInvalid},
			{call: call{key: `"k1 "`}, status: 400, code: idemhttp.CodeKeyInvalid},
		}, calls: 0},
		{name: "different body is a mismatch", steps: []step{
			{call: call{key: "k1", ct: "application/json", body: `{"amount":1}`}, status: 201, body: "call 1:"},
			{call: call{key: "k1", ct: "application/json", body: `{"amount":2}`}, status: 422, code: idemhttp.CodeKeyMismatch},
		}, calls: 1},
		{name: "different query, path, method or content type is a mismatch", steps: []step{
			{call: call{key: "k1", path: "/pay?x=1"}, status: 201, body: "call 1:"},
			{call: call{key: "k1", path: "/pay?x=2"}, status: 422, code: idemhttp.CodeKeyMismatch},
			{call: call{key: "k1", path: "/refund?x=1"}, status: 422, code: idemhttp.CodeKeyMismatch},
			{call: call{key: "k1", path: "/pay?x=1", method: "PATCH"}, status: 422, code: idemhttp.CodeKeyMismatch},
			{call: call{key: "k1", path: "/pay?x=1", ct: "text/plain"}, status: 422, code: idemhttp.CodeKeyMismatch},
		}, calls: 1},
		{name: "equivalent JSON replays", steps: []step{
			{call: call{key: "k1", ct: "application/json", body: `{"amount":100,"meta":{"b":[1,2],"a":null}}`}, status: 201, body: "call 1:"},
			{call: call{key: "k1", ct: "application/json", body: "{ \"meta\" : {\"a\":null, \"b\":[ 1 , 2 ]},\n\t\"amount\": 100 }"},
				status: 201, body: "call 1:", replayed: true},
		}, calls: 1},
		{name: "malformed JSON is fingerprinted as bytes", steps: []step{
			{call: call{key: "k1", ct: "application/json", body: `{"amount":`}, status: 201, body: "call 1:"},
			{call: call{key: "k1", ct: "application/json", body: `{"amount":`}, status: 201, body: "call 1:", replayed: true},
			{call: call{key: "k1", ct: "application/json", body: `{ "amount":`}, status: 422, code: idemhttp.CodeKeyMismatch},
		}, calls: 1},
		{name: "body over the limit gets 413 and takes no key", opts: idemhttp.Options{MaxBody: 10}, steps: []step{
			{call: call{key: "k1", body: "0123456789A"}, status: 413, code: idemhttp.CodeBodyTooLarge},
			{call: call{key: "k1", body: "0123456789A", chunked: true}, status: 413, code: idemhttp.CodeBodyTooLarge},
			{call: call{key: "k1", body: "0123456789", chunked: true}, status: 201, body: "call 1:"},
			{call: call{key: "k1", body: "0123456789"}, status: 201, body: "call 1:", replayed: true},
		}, calls: 1},
		// A 503 does not prove that nothing ran (http.TimeoutHandler, an
		// Envoy reset, Heroku's H12 answer it while the work goes on).
		{name: "503 makes the key UNKNOWN, 500 is stored", statuses: []int{503, 500}, steps: []step{
			{call: call{key: "k1"}, status: 503, body: "call 1:"},
			{call: call{key: "k1"}, status: 503, code: idemhttp.CodeOutcomeUnknown},
			{call: call{key: "k2"}, status: 500, body: "call 2:"},
			{call: call{key: "k2"}, status: 500, body: "call 2:", replayed: true},
		}, calls: 2},
		{name: "502 and 504 make the key UNKNOWN", statuses: []int{502, 201}, steps: []step{
			{call: call{key: "k1"}, status: 502, body: "call 1:"},
			{call: call{key: "k1"}, status: 503, code: idemhttp.CodeOutcomeUnknown},
			{call: call{key: "k2"}, status: 201, body: "call 2:"},
		}, calls: 2},
		{name: "the seed's policy: release on 5xx", statuses: []int{500, 502, 201},
			opts: idemhttp.Options{StoreResult: idemhttp.DefaultStoreResult}, steps: []step{
				{call: call{key: "k1"}, status: 500, body: "call 1:"},
				{call: call{key: "k1"}, status: 502, body: "call 2:"},
				{call: call{key: "k1"}, status: 201, body: "call 3:"},
				{call: call{key: "k1"}, status: 201, body: "call 3:", replayed: true},
			}, calls: 3},
		{name: "a status policy of one's own", statuses: []int{201, 200},
			opts: idemhttp.Options{StatusPolicy: func(s int) idemhttp.Disposition {
				if s == 201 {
					return idemhttp.DispositionUnknown
				}
				return idemhttp.DispositionStore
			}}, steps: []step{
				{call: call{key: "k1"}, status: 201, body: "call 1:"},
				{call: call{key: "k1"}, status: 503, code: idemhttp.CodeOutcomeUnknown},
			}, calls: 1},
		{name: "425 and 429 release the key", statuses: []int{425, 429, 200}, steps: []step{
			{call: call{key: "k1"}, status: 425},
			{call: call{key: "k1"}, status: 429},
			{call: call{key: "k1"}, status: 200, body: "call 3:"},
			{call: call{key: "k1"}, status: 200, body: "call 3:", replayed: true},
		}, calls: 3},
		// Timeout middleware (gin-contrib/timeout) answers 408 while the
		// handler goes on charging: the retry must not run it again.
		{name: "a 408 is unknown", statuses: []int{408, 200}, steps: []step{
			{call: call{key: "k1"}, status: 408},
			{call: call{key: "k1"}, status: 503, code: idemhttp.CodeOutcomeUnknown},
		}, calls: 1},
		// Issue 31, item 12: answers given before the work started are not
		// stored (a 401 to made-up credentials filled the memory store).
		{name: "refusals before the work release the key", statuses: []int{401, 403, 407, 411, 413, 414, 415, 431, 200}, steps: []step{
			{call: call{key: "k1"}, status: 401},
			{call: call{key: "k1"}, status: 403},
			{call: call{key: "k1"}, status: 407},
			{call: call{key: "k1"}, status: 411},
			{call: call{key: "k1"}, status: 413},
			{call: call{key: "k1"}, status: 414},
			{call: call{key: "k1"}, status: 415},
			{call: call{key: "k1"}, status: 431},
			{call: call{key: "k1"}, status: 200, body: "call 9:"},
			{call: call{key: "k1"}, status: 200, body: "call 9:", replayed: true},
		}, calls: 9},
		{name: "other 4xx are stored", statuses: []int{400}, steps: []step{
			{call: call{key: "k1"}, status: 400, body: "call 1:"},
			{call: call{key: "k1"}, status: 400, body: "call 1:", replayed: true},
		}, calls: 1},
		{name: "the storing policy is replaceable", statuses: []int{500},
			opts: idemhttp.Options{StoreResult: func(int) bool { return true }}, steps: []step{
				{call: call{key: "k1"}, status: 500, body: "call 1:"},
				{call: call{key: "k1"}, status: 500, body: "call 1:", replayed: true},
			}, calls: 1},
		{name: "credentials scope the key", steps: []step{
			{call: call{key: "k1", auth: "Bearer alice"}, status: 201, body: "call 1: Bearer alice"},
			{call: call{key: "k1", auth: "Bearer bob"}, status: 201, body: "call 2: Bearer bob"},
			{call: call{key: "k1"}, status: 201, body: "call 3:"},
			{call: call{key: "k1", auth: "Bearer alice"}, status: 201, body: "call 1: Bearer alice", replayed: true},
			{call: call{key: "k1", auth: "Bearer bob"}, status: 201, body: "call 2: Bearer bob", replayed: true},
		}, calls: 3},
		{name: "TenantHeader scopes the key", opts: idemhttp.Options{TenantHeader: "X-Tenant-ID"}, steps: []step{
			{call: call{key: "k1"}, status: 400, code: idemhttp.CodeTenantInvalid},
			{call: call{key: "k1", header: map[string]string{"X-Tenant-ID": long}}, status: 400, code: idemhttp.CodeTenantInvalid},
			{call: call{key: "k1", header: map[string]string{"X-Tenant-ID": "acme"}, auth: "Bearer alice"}, status: 201, body: "call 1: Bearer alice"},
			{call: call{key: "k1", header: map[string]string{"X-Tenant-ID": "acme"}, auth: "Bearer bob"}, status: 201, body: "call 1: Bearer alice", replayed: true},
			{call: call{key: "k1", header: map[string]string{"X-Tenant-ID": "globex"}}, status: 201, body: "call 2:"},
		}, calls: 2},
		{name: "store down fails closed", storeDown: true, steps: []step{
			{call: call{key: "k1"}, status: 503, code: idemhttp.CodeStoreUnavailable},
			{call: call{}, status: 201, body: "call 1:"},
		}, calls: 1},
		{name: "FailOpen runs the handler when the store is down", storeDown: true, opts: idemhttp.Options{FailOpen: true}, steps: []step{
			{call: call{key: "k1"}, status: 201, body: "call 1:"},
			{call: call{key: "k1"}, status: 201, body: "call 2:"},
		}, calls: 2},
	}
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				store := &storekit.Faulty{Store: newStore(t)}
				if tt.storeDown {
					store.FailNext(storekit.OpAcquire, math.MaxInt)
				}
				var calls atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := calls.Add(1)
					status := 201
					if len(tt.statuses) > 0 {
						status = tt.statuses[min(int(n), len(tt.statuses))-1]
					}
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(status)
					fmt.Fprintf(w, "call %d: %s", n, r.Header.Get("Authorization"))
				})
				opts := tt.opts
				srv := serve(t, newMiddleware(t, newEngine(t, store, nil), &opts)(h))
				for i, s := range tt.steps {
					r := s.send(t, srv)
					if s.code != "" {
						checkProblem(t, r, s.status, s.code)
						if r.header.Get(idemhttp.HeaderReplayed) != "" {
							t.Errorf("step %d: a problem response is marked replayed", i)
						}
						continue
					}
					if r.status != s.status {
						t.Fatalf("step %d: status %d, want %d (%s)", i, r.status, s.status, r.body)
					}
					if s.body != "" && strings.TrimSpace(string(r.body)) != s.body {
						t.Errorf("step %d: body %q, want %q", i, r.body, s.body)
					}
					if got := r.header.Get(idemhttp.HeaderReplayed) == "true"; got != s.replayed {
						t.Errorf("step %d: replayed %v, want %v", i, got, s.replayed)
					}
				}
				if got := calls.Load(); got != tt.calls {
					t.Errorf("the handler ran %d times, want %d", got, tt.calls)
				}
			})
		}
	})
}

// TestReplayHeaders: a replay carries the safe headers and the configured
// ones, never Set-Cookie or others.
func TestReplayHeaders(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hd := w.Header()
			hd.Set("Content-Type", "application/json")
			hd.Set("Location", "/payments/1")
			hd.Set("Content-Language", "de")
			hd.Set("Content-Disposition", "inline")
			hd.Set("ETag", `"v1"`)
			hd.Set("X-Payment-Cost", "7")
			hd.Set("X-Internal", "secret")
			hd.Set("Set-Cookie", "session=abc")
			hd.Set("Cache-Control", "private")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":1}`))
			hd.Set("Location", "/changed-after-write") // not what the client got: not replayed
		})
		srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), nil), &idemhttp.Options{ReplayHeaders: []string{"x-payment-cost"}})(h))
		first := call{key: "k"}.send(t, srv)
		replay := call{key: "k"}.send(t, srv)
		if first.status != 201 || replay.status != 201 || string(replay.body) != `{"id":1}` {
			t.Fatalf("first %d, replay %d %q", first.status, replay.status, replay.body)
		}
		for _, name := range []string{"Content-Type", "Location", "Content-Language", "Content-Disposition", "Etag", "X-Payment-Cost"} {
			if got, want := replay.header.Get(name), first.header.Get(name); got != want || got == "" {
				t.Errorf("replayed %s = %q, want %q", name, got, want)
			}
		}
		for _, name := range []string{"Set-Cookie", "X-Internal", "Cache-Control"} {
			if got := replay.header.Get(name); got != "" {
				t.Errorf("replay carries %s: %q", name, got)
			}
		}
		if replay.header.Get(idemhttp.HeaderReplayed) != "true" || first.header.Get(idemhttp.HeaderReplayed) != "" {
			t.Errorf("marker: first %q, replay %q", first.header.Get(idemhttp.HeaderReplayed), replay.header.Get(idemhttp.HeaderReplayed))
		}
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	e := newEngine(t, &storekit.Faulty{}, nil)
	bad := map[string]*idemhttp.Options{
		"negative MaxBody":                {MaxBody: -1},
		"negative MaxResponseBuffer":      {MaxResponseBuffer: -1},
		"negative Wait":                   {Wait: -1},
		"lease under 1ms":                 {LeaseDuration: 1000},
		"lease above store.MaxDuration":   {LeaseDuration: store.MaxDuration + 1},
		"retention above the same":        {Retention: store.MaxDuration + 1},
		"key retention above the same":    {KeyRetention: store.MaxDuration + 1},
		"Tenant and TenantHeader":         {TenantHeader: "X-Tenant", Tenant: func(*http.Request) (string, error) { return "", nil }},
		"bad TenantHeader":                {TenantHeader: "X Tenant"},
		"bad method":                      {Methods: []string{"PO ST"}},
		"empty method":                    {Methods: []string{""}},
		"Set-Cookie replayed":             {ReplayHeaders: []string{"set-cookie"}},
		"Authorization replayed":          {ReplayHeaders: []string{"Authorization"}},
		"hop-by-hop header replayed":      {ReplayHeaders: []string{"Transfer-Encoding"}},
		"bad replay header name":          {ReplayHeaders: []string{"X:Y"}},
		"the internal marker replayed":    {ReplayHeaders: []string{"Idem-Not-Replayable"}},
		"the replay marker as a replayed": {ReplayHeaders: []string{idemhttp.HeaderReplayed}},
	}
	for name, o := range bad {
		if _, err := idemhttp.New(e, o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := idemhttp.New(nil, nil); err == nil {
		t.Error("New accepted a nil engine")
	}
	if _, err := idemhttp.New(e, nil); err != nil {
		t.Errorf("nil options: %v", err)
	}
}

func TestOutcomeNames(t *testing.T) {
	seen := map[string]bool{}
	for o := idemhttp.OutcomePassed; o <= idemhttp.OutcomeLeaseLost; o++ {
		s := o.String()
		if s == "" || strings.HasPrefix(s, "Outcome(") || seen[s] {
			t.Errorf("outcome %d is named %q", o, s)
		}
		seen[s] = true
	}
	if s := idemhttp.Outcome(200).String(); s != "Outcome(200)" {
		t.Errorf("unknown outcome named %q", s)
	}
}
