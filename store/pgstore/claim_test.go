package pgstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
)

// afterStatement runs then once, right after the first statement whose
// SQL contains match has ended on a connection of the pool it traces:
// a write by another client lands between that statement and whatever
// the caller does next, deterministically.
type afterStatement struct {
	match string
	then  func()
	once  sync.Once
	fired bool
}

type statementKey struct{}

func (a *afterStatement) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, statementKey{}, strings.Contains(data.SQL, a.match))
}

func (a *afterStatement) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ours, _ := ctx.Value(statementKey{}).(bool); ours {
		a.once.Do(func() { a.then(); a.fired = true })
	}
}

// TestClaimDecidesOnTheRowItReturns: Claim answers with the row it made
// its decision on. The key is PROCESSING, its lease running, so a claim
// is refused; right after the claim's statement its owner marks it
// UNKNOWN. Claim must report the PROCESSING row it refused. Before, it
// decided with one statement and read the row with a second: it reported
// an UNKNOWN row that nobody claims as not claimed, which says another
// process is reconciling it, and the retry was told outcome_unknown with
// no reconciliation under way.
func TestClaimDecidesOnTheRowItReturns(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	id := store.ID{Tenant: "acme", Key: "claim-decides"}
	acq, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "worker", Fingerprint: "fp", LeaseDuration: time.Hour, Retention: time.Hour})
	if err != nil || !acq.Acquired {
		t.Fatalf("Acquire = %+v, %v", acq, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "worker", Fence: acq.Record.Fence}

	hook := &afterStatement{match: "claim_owner = $3", then: func() {
		if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "reply lost", Retention: time.Hour}); err != nil {
			t.Errorf("MarkUnknown between the claim's statements: %v", err)
		}
	}}
	cfg := s.Pool().Config().Copy()
	cfg.ConnConfig.Tracer = hook
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	traced, err := pgstore.New(pool, &pgstore.Options{Schema: s.Schema(), ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { traced.Close() })

	res, err := traced.Claim(ctx, store.ClaimParams{ID: id, Owner: "reconciler", LeaseDuration: time.Minute})
	if !hook.fired {
		t.Fatal("the owner's MarkUnknown did not run after the claim's statement: the test did not bite")
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed || res.Record.State != store.StateProcessing || res.Record.Fence != ref.Fence {
		t.Fatalf("Claim of a running lease = claimed %t, record %v fence %d; want not claimed, the PROCESSING row of fence %d it decided on",
			res.Claimed, res.Record.State, res.Record.Fence, ref.Fence)
	}
	// The row is UNKNOWN now, unclaimed: the next claim takes it.
	res, err = traced.Claim(ctx, store.ClaimParams{ID: id, Owner: "reconciler", LeaseDuration: time.Minute})
	if err != nil || !res.Claimed || res.Record.State != store.StateUnknown || res.Record.Reason != "reply lost" {
		t.Fatalf("second Claim = %+v, %v; want claimed, UNKNOWN, reason kept", res, err)
	}
}
