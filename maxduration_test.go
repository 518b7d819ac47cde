package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// Above store.MaxDuration the engine refuses a lease, a retention or a
// key retention, in its Options and per request: past the clock
// arithmetic of a store (292 years of nanoseconds for the memory store's)
// a record ended at once, and a retry ran the work again. At it, every
// store keeps them (storetest's MaxDurationKept).
func TestMaxDurationRefused(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	over := store.MaxDuration + time.Millisecond
	for _, o := range []idem.Options{{LeaseDuration: over}, {Retention: over}, {KeyRetention: over}} {
		if _, err := idem.New(s, &o); err == nil {
			t.Errorf("New(%+v) = nil error; want longer than store.MaxDuration refused", o)
		}
	}
	e := newEngine(t, s, &idem.Options{LeaseDuration: store.MaxDuration, Retention: store.MaxDuration, KeyRetention: store.MaxDuration})
	for _, r := range []idem.Request{{LeaseDuration: over}, {Retention: over}, {KeyRetention: over}} {
		r.Tenant, r.Key, r.Fingerprint = "acme", "over", "fp"
		if _, err := e.Begin(context.Background(), r); !errors.Is(err, idem.ErrInvalidRequest) {
			t.Errorf("Begin(%+v) = %v; want ErrInvalidRequest", r, err)
		}
	}
}
