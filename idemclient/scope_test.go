package idemclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// A handler behind the idemhttp middleware propagates keys without a
// WithScope of its own: the scope is its request's lease.
func TestScopeFromTheMiddlewaresLease(t *testing.T) {
	var sent []string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent = append(sent, r.Header.Get("Idempotency-Key"))
	}))
	defer provider.Close()
	client := &http.Client{Transport: &idemclient.Propagator{Base: http.DefaultTransport}}

	store, _ := memstore.New(nil)
	engine, _ := idem.New(store, nil)
	mw, err := idemhttp.New(engine, &idemhttp.Options{TenantHeader: "X-Tenant-ID"})
	if err != nil {
		t.Fatal(err)
	}
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(idemclient.WithStep(r.Context(), "charge"), http.MethodPost, provider.URL, strings.NewReader("amount=1"))
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(http.StatusCreated)
	}))
	srv := httptest.NewServer(handler)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "order-9")
	req.Header.Set("X-Tenant-ID", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("handler answered %d %s", resp.StatusCode, body)
	}
	if want := idemclient.StepKey("acme", "order-9", "charge"); len(sent) != 1 || sent[0] != want {
		t.Fatalf("provider got keys %q; want [%q], derived from the request's tenant and key", sent, want)
	}
}

// A function run by idem.Engine.Do has the scope of its lease too.
func TestScopeFromDosLease(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := idem.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = engine.Do(t.Context(), idem.Request{Tenant: "acme", Key: "job-7", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
		if tenant, key, ok := idemclient.ScopeFrom(ctx); !ok || tenant != "acme" || key != "job-7" {
			t.Errorf("ScopeFrom in Do = %q, %q, %t; want acme, job-7", tenant, key, ok)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// DerivedKey gives the innermost step's key under a scope, and names
// what is missing otherwise.
func TestDerivedKey(t *testing.T) {
	if _, err := idemclient.DerivedKey(idemclient.WithStep(context.Background(), "charge")); !errors.Is(err, idemclient.ErrNoScope) {
		t.Fatalf("no scope: err = %v, want ErrNoScope", err)
	}
	scoped := idemclient.WithScope(context.Background(), "acme", "order-42")
	if _, err := idemclient.DerivedKey(scoped); !errors.Is(err, idemclient.ErrNoStep) {
		t.Fatalf("no step: err = %v, want ErrNoStep", err)
	}
	ctx := idemclient.WithStep(idemclient.WithStep(scoped, "charge"), "refund/0")
	if k, err := idemclient.DerivedKey(ctx); err != nil || k != idemclient.StepKey("acme", "order-42", "refund/0") {
		t.Fatalf("DerivedKey = %q, %v; want the step key of refund/0", k, err)
	}
}
