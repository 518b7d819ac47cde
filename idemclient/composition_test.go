package idemclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/store/memstore"
)

// compositions returns the ways to stack Retrying and Propagator over
// base: either order, and Retrying alone.
func compositions(t *testing.T, base http.RoundTripper) map[string]http.RoundTripper {
	t.Helper()
	s := &sleeper{}
	retrying := func(base http.RoundTripper) http.RoundTripper {
		rt, err := idemclient.NewRetrying(base, &idemclient.RetryOptions{Sleep: s.Sleep})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	return map[string]http.RoundTripper{
		"Propagator/Retrying": &idemclient.Propagator{Base: retrying(base)},
		"Retrying/Propagator": retrying(&idemclient.Propagator{Base: base}),
		"Retrying":            retrying(base),
	}
}

// sendTwice sends method through rt to a server that answers 503 and then
// 200, and returns the keys of both attempts.
func sendTwice(t *testing.T, rt http.RoundTripper, ctx context.Context, method string) []string {
	t.Helper()
	srv := newScripted(t, []int{503}, nil)
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL, strings.NewReader("x"))
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Errorf("%s: %v", method, err)
		return nil
	}
	readAll(t, resp)
	return srv.seen()
}

// Under a scope, the order of Retrying and Propagator does not matter:
// Retrying outermost used to give a POST a random key, which Propagator
// kept, so a handler run again sent the downstream call under a new key.
func TestRetryingAndPropagatorInEitherOrder(t *testing.T) {
	ctx := idemclient.WithStep(idemclient.WithScope(context.Background(), "acme", "order-42"), "charge")
	want := idemclient.StepKey("acme", "order-42", "charge")
	for name, rt := range compositions(t, transport(t)) {
		for _, method := range []string{http.MethodPost, http.MethodPatch, http.MethodDelete} {
			if keys := sendTwice(t, rt, ctx, method); len(keys) != 2 || keys[0] != want || keys[1] != want {
				t.Errorf("%s %s: attempts sent keys %q; want %q twice", name, method, keys, want)
			}
		}
	}
}

// The same under a real lease: a function run by Engine.Do, with no
// WithScope of its own.
func TestRetryingAndPropagatorInEitherOrderUnderALease(t *testing.T) {
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := idem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := idemclient.StepKey("acme", "job-7", "charge")
	_, _, err = engine.Do(t.Context(), idem.Request{Tenant: "acme", Key: "job-7", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
		ctx = idemclient.WithStep(ctx, "charge")
		for name, rt := range compositions(t, transport(t)) {
			if keys := sendTwice(t, rt, ctx, http.MethodPost); len(keys) != 2 || keys[0] != want || keys[1] != want {
				t.Errorf("%s: attempts sent keys %q; want %q twice", name, keys, want)
			}
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Under a scope, a POST or PATCH whose context names no step is refused by
// Retrying, in either order and alone, as Propagator refuses it: a random
// key would be new on every run of the handler. Its body is closed and
// nothing is sent. A key the caller set needs no step.
func TestRetryingUnderScopeWithoutStepRefuses(t *testing.T) {
	srv := newScripted(t, nil, nil)
	url := strings.Replace(srv.URL, "http://", "http://user:secret@", 1)
	scoped := idemclient.WithScope(context.Background(), "acme", "order-42")
	for name, rt := range compositions(t, transport(t)) {
		for _, tc := range []struct {
			ctx    context.Context
			method string
			want   error
		}{
			{scoped, http.MethodPost, idemclient.ErrNoStep},
			{scoped, http.MethodPatch, idemclient.ErrNoStep},
			{idemclient.WithStep(scoped, ""), http.MethodPost, idemclient.ErrNoStep},
			{idemclient.WithStep(idemclient.WithScope(context.Background(), "acme", ""), "charge"), http.MethodPost, idem.ErrInvalidKey},
		} {
			body := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader("x"))}
			req, _ := http.NewRequestWithContext(tc.ctx, tc.method, url, body)
			resp, err := rt.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%s %s: error %v; want %v", name, tc.method, err, tc.want)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, tc.method+" ") || strings.Contains(msg, "secret") {
				t.Errorf("%s %s: error %q; want the method and the redacted URL", name, tc.method, msg)
			}
			if !body.closed.Load() {
				t.Errorf("%s %s: request body not closed", name, tc.method)
			}
		}
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("server received %d requests; want none", n)
	}

	for name, rt := range compositions(t, transport(t)) {
		req, _ := http.NewRequestWithContext(scoped, http.MethodPost, srv.URL, nil)
		req.Header.Set(idemclient.HeaderKey, "mine")
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			t.Fatalf("%s: caller's key under a scope without step: %v", name, err)
		}
		readAll(t, resp)
	}
	if keys := srv.seen(); strings.Join(keys, ",") != "mine,mine,mine" {
		t.Fatalf("keys %q; want the caller's key, once per composition", keys)
	}
}
