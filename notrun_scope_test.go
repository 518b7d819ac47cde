package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// TestNestedReleasedDoKeepsTheOuterKey: the outer work charges, then an
// inner Do for a sub-step releases its own key (its work said NotRun) and
// the outer work returns that error wrapped. The NotRun spoke for the
// inner work only: the outer key turns UNKNOWN, and a retry does not
// charge again. Do's error still says the cause (errors.Is) and that its
// own key was released (Retryable). It used to carry the mark out, and the
// outer Do released its key after the charge.
func TestNestedReleasedDoKeepsTheOuterKey(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, mustMem(t), nil)
	refused := errors.New("mailer: connection refused")
	charges := 0
	var inner error
	outer := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		charges++ // the effect
		_, _, err := e.Do(ctx, idem.Request{Tenant: "acme", Key: "job-1/receipt", NoFingerprint: true},
			func(context.Context, *idem.Lease) ([]byte, error) { return nil, idem.NotRun(refused) })
		inner = err
		if err != nil {
			return nil, fmt.Errorf("send receipt: %w", err)
		}
		return []byte("charged"), nil
	}
	req := idem.Request{Tenant: "acme", Key: "job-1", NoFingerprint: true}
	_, _, err := e.Do(ctx, req, outer)
	if !idem.Retryable(inner) || !errors.Is(inner, refused) || errors.Is(inner, idem.ErrOutcomeUnknown) {
		t.Fatalf("inner Do = %v; want its cause, its key released (Retryable)", inner)
	}
	if !errors.Is(err, idem.ErrOutcomeUnknown) || idem.Retryable(err) || !errors.Is(err, refused) {
		t.Fatalf("outer Do = %v; want an unknown outcome that wraps the cause, not retryable", err)
	}
	rec, gerr := e.Get(ctx, store.ID{Tenant: "acme", Key: "job-1"})
	if gerr != nil || rec.State != store.StateUnknown {
		t.Fatalf("outer key = %+v, %v; want UNKNOWN", rec, gerr)
	}
	if _, _, err := e.Do(ctx, req, outer); !errors.Is(err, idem.ErrOutcomeUnknown) || charges != 1 {
		t.Fatalf("retry = %v after %d charges; want UNKNOWN, one charge", err, charges)
	}
}

// TestNestedReleasedDoMarkedAgainReleases: an outer work with no effect
// before the inner Do says so itself with NotRun, and its key is
// released as before.
func TestNestedReleasedDoMarkedAgainReleases(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, mustMem(t), nil)
	refused := errors.New("quota")
	runs := 0
	outer := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		runs++
		_, _, err := e.Do(ctx, idem.Request{Tenant: "acme", Key: "job-2/step", NoFingerprint: true},
			func(context.Context, *idem.Lease) ([]byte, error) { return nil, idem.NotRun(refused) })
		if idem.Retryable(err) { // nothing of this work ran before the step
			return nil, idem.NotRun(err)
		}
		return nil, err
	}
	req := idem.Request{Tenant: "acme", Key: "job-2", NoFingerprint: true}
	for i := range 2 {
		if _, _, err := e.Do(ctx, req, outer); !idem.Retryable(err) || !errors.Is(err, refused) {
			t.Fatalf("Do %d = %v; want released", i+1, err)
		}
	}
	if runs != 2 {
		t.Fatalf("outer work ran %d times; want 2 (released each time)", runs)
	}
}
