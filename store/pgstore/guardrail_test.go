package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
)

func TestReserveDuplicateIsTyped(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, tx, "acme", "k", 1); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = s.Reserve(ctx, tx, "acme", "k", 2)
	var pgErr *pgconn.PgError
	if !errors.Is(err, pgstore.ErrDuplicate) || !errors.As(err, &pgErr) || pgErr.Code != pgstore.UniqueViolation {
		t.Fatalf("second Reserve = %v; want ErrDuplicate wrapping a 23505 PgError", err)
	}
	if errors.Is(err, pgstore.ErrStaleFence) {
		t.Fatal("ErrDuplicate also matches ErrStaleFence")
	}
	// The same key in another tenant is another reservation.
	tx2, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	if err := s.Reserve(ctx, tx2, "other", "k", 3); err != nil {
		t.Fatalf("Reserve in another tenant: %v", err)
	}
}

func TestRolledBackReservationFreesTheKey(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, tx, "acme", "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil { // the work failed
		t.Fatal(err)
	}
	if _, err := s.Reservation(ctx, s.Pool(), "acme", "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Reservation after rollback = %v; want ErrNotFound", err)
	}
	tx, err = s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := s.Reserve(ctx, tx, "acme", "k", 2); err != nil {
		t.Fatalf("retry's Reserve after a rolled-back attempt: %v", err)
	}
}

func TestStaleFenceRefused(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	db := s.Pool()
	if _, err := db.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO accounts VALUES (1, 100, 0)`); err != nil {
		t.Fatal(err)
	}
	debit := func(fence int64) error {
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := pgstore.FencedExec(ctx, tx, `UPDATE accounts SET balance = balance - 10, fence = $1 WHERE id = 1 AND fence <= $1`, fence); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := debit(7); err != nil {
		t.Fatalf("debit with fence 7: %v", err)
	}
	if err := debit(5); !errors.Is(err, pgstore.ErrStaleFence) {
		t.Fatalf("debit with stale fence 5 = %v; want ErrStaleFence", err)
	}
	var balance int
	if err := db.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if balance != 90 {
		t.Fatalf("balance = %d; want 90 (one debit)", balance)
	}

	// Settle refuses a fence below the reservation's, and a second settle.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := s.Reserve(ctx, tx, "acme", "k", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, tx, "acme", "k", 9, []byte("stale")); !errors.Is(err, pgstore.ErrStaleFence) {
		t.Fatalf("Settle with fence 9 below 10 = %v; want ErrStaleFence", err)
	}
	if err := s.Settle(ctx, tx, "acme", "k", 10, []byte("ok")); err != nil {
		t.Fatalf("Settle with the reserving fence: %v", err)
	}
	if err := s.Settle(ctx, tx, "acme", "k", 11, []byte("again")); !errors.Is(err, pgstore.ErrStaleFence) {
		t.Fatalf("second Settle = %v; want ErrStaleFence", err)
	}
	r, err := s.Reservation(ctx, tx, "acme", "k")
	if err != nil || string(r.Outcome) != "ok" || r.Fence != 10 || r.SettledAt.IsZero() {
		t.Fatalf("Reservation = %+v, %v; want settled by fence 10 with outcome ok", r, err)
	}
}

// TestTwoWorkersLeaseExpiresMidRequest runs the article's flow in two
// workers for one key, with the first worker's lease expiring while it
// works (renewal off, a short lease) and the first worker not noticing, as
// a paused process would not: its flow runs on a context the lease does
// not cancel. B takes the key over (Options.Takeover = TakeoverRun: the
// guardrail is what makes a second run safe) and is told A's fence. The
// database guardrail must let exactly one provider call commit.
func TestTwoWorkersLeaseExpiresMidRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stallBeforeReserve: worker A stalls before its Reserve (B reserves
		// first); otherwise after it, before calling the provider (B's
		// Reserve waits for A's transaction).
		stallBeforeReserve bool
	}{{"StallBeforeReserve", true}, {"StallAfterReserve", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			ctx := context.Background()
			const lease = 150 * time.Millisecond
			engine, err := idem.New(s, &idem.Options{LeaseDuration: lease, RenewEvery: -1, Takeover: idem.TakeoverRun})
			if err != nil {
				t.Fatal(err)
			}
			prov := newProvider()
			req := idem.Request{Tenant: "acme", Key: "order-1", Fingerprint: "fp"}

			attA, err := engine.Begin(ctx, req)
			if err != nil || attA.Outcome != idem.Acquired {
				t.Fatalf("A: Begin = %+v, %v", attA, err)
			}
			fenceA := attA.Lease.Fence()
			stalled, resume := make(chan struct{}), make(chan struct{})
			var resumeOnce sync.Once
			resumeA := func() { resumeOnce.Do(func() { close(resume) }) }
			t.Cleanup(resumeA) // a failing test does not leave A stalled on the pool
			type result struct {
				out []byte
				err error
			}
			doneA := make(chan result, 1)
			go func() {
				tx, err := s.Pool().Begin(ctx)
				if err != nil {
					doneA <- result{err: err}
					return
				}
				defer tx.Rollback(ctx)
				if tc.stallBeforeReserve {
					close(stalled)
					<-resume
				}
				if err := s.Reserve(ctx, tx, req.Tenant, req.Key, fenceA); err != nil {
					doneA <- result{err: err}
					return
				}
				if !tc.stallBeforeReserve {
					close(stalled)
					<-resume
				}
				id, err := prov.Charge(ctx, req.Tenant+"/"+req.Key, 4200)
				if err == nil {
					err = s.Settle(ctx, tx, req.Tenant, req.Key, fenceA, []byte(id))
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				doneA <- result{out: []byte(id), err: err}
			}()
			<-stalled
			<-attA.Lease.Context().Done() // A's lease has expired by A's clock (A does not look)
			// B's lease is long: B must still hold it when it completes,
			// after its work and, in StallAfterReserve, after A's.
			reqB := req
			reqB.LeaseDuration = time.Minute
			attB, err := engine.Begin(ctx, reqB)
			for i := 0; err == nil && attB.Outcome == idem.InFlight && i < 10; i++ {
				time.Sleep(attB.RetryAfter) // the database's clock ends the lease a little later
				attB, err = engine.Begin(ctx, reqB)
			}
			if err != nil || attB.Outcome != idem.Acquired {
				t.Fatalf("B: Begin after A's lease expired = %+v, %v; want Acquired", attB, err)
			}
			if attB.Lease.Fence() <= fenceA {
				t.Fatalf("B's fence %d is not above A's %d", attB.Lease.Fence(), fenceA)
			}
			if tk := attB.Lease.PreviousFence(); tk != fenceA {
				t.Fatalf("B's Takeover = %+v; want A's fence %d", tk, fenceA)
			}
			doneB := make(chan result, 1)
			go func() {
				out, err := chargeOnce(ctx, s.Pool(), s, prov, req.Tenant, req.Key, attB.Lease.Fence())
				doneB <- result{out, err}
			}()
			var b result
			if tc.stallBeforeReserve {
				b = <-doneB // B finishes while A is stalled
				resumeA()
			} else {
				resumeA() // B is waiting in Reserve on A's transaction
				b = <-doneB
			}
			a := <-doneA
			calls, _ := prov.counts()
			if calls != 1 {
				t.Fatalf("provider called %d times; want exactly 1", calls)
			}
			r, err := s.Reservation(ctx, s.Pool(), req.Tenant, req.Key)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stallBeforeReserve {
				if !errors.Is(a.err, pgstore.ErrDuplicate) && !errors.Is(a.err, pgstore.ErrStaleFence) {
					t.Fatalf("stalled A = %v; want ErrDuplicate or ErrStaleFence", a.err)
				}
				if b.err != nil || r.Fence != attB.Lease.Fence() {
					t.Fatalf("B = %v, reservation fence %d; want B's commit with fence %d", b.err, r.Fence, attB.Lease.Fence())
				}
			} else {
				if a.err != nil || r.Fence != fenceA {
					t.Fatalf("A = %v, reservation fence %d; want A's commit with fence %d", a.err, r.Fence, fenceA)
				}
				// B met A's committed reservation (ErrDuplicate inside
				// chargeOnce) and took its recorded outcome.
				if b.err != nil || string(b.out) != string(a.out) {
					t.Fatalf("B = %q, %v; want A's outcome %q", b.out, b.err, a.out)
				}
			}
			// The idem record ends COMPLETED by B, the lease holder;
			// A's stale Complete is refused.
			if err := attA.Lease.Complete(ctx, store.Result{Body: a.out}); !errors.Is(err, store.ErrLeaseLost) {
				t.Fatalf("A's Complete = %v; want ErrLeaseLost", err)
			}
			if err := attB.Lease.Complete(ctx, store.Result{Body: b.out}); err != nil {
				t.Fatalf("B's Complete: %v", err)
			}
		})
	}
}

// TestGuardReservesRunsSettlesCommits (issue 32 item 9): the closure form
// of the guardrail, taking the lease. Under Do on this store: a work that
// fails before its effect rolls its reservation back, so the retry runs;
// a work that succeeds is settled and committed with its outcome; a later
// owner of the key (the idem record lost, here deleted by force) gets that
// outcome from the guardrail without running the work; a panic rolls
// back and goes on.
func TestGuardReservesRunsSettlesCommits(t *testing.T) {
	s := newStore(t)
	pool := s.Pool()
	ctx := context.Background()
	e, err := idem.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := idem.Request{Tenant: "acme", Key: "charge-1", NoFingerprint: true}
	runs := 0
	charge := func(fail error) func(context.Context, *idem.Lease) ([]byte, error) {
		return func(ctx context.Context, l *idem.Lease) ([]byte, error) {
			return s.Guard(ctx, pool, l, func(tx pgx.Tx) ([]byte, error) {
				runs++
				if fail != nil {
					return nil, fail
				}
				var n int
				if err := tx.QueryRow(ctx, "SELECT 42").Scan(&n); err != nil { // the application's own write goes here
					return nil, err
				}
				return []byte("ch_1"), nil
			})
		}
	}
	declined := errors.New("card declined, nothing charged")
	if _, _, err := e.Do(ctx, key, charge(idem.NotRun(declined))); !errors.Is(err, declined) || !idem.Retryable(err) {
		t.Fatalf("Do with a declined charge = %v; want the error, the key released", err)
	}
	if _, err := s.Reservation(ctx, pool, "acme", "charge-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("reservation after the failed work = %v; want none: rolled back", err)
	}
	out, _, err := e.Do(ctx, key, charge(nil))
	if err != nil || string(out) != "ch_1" || runs != 2 {
		t.Fatalf("Do = %q, %v after %d runs; want ch_1 from the second run", out, err, runs)
	}
	r, err := s.Reservation(ctx, pool, "acme", "charge-1")
	if err != nil || string(r.Outcome) != "ch_1" || r.SettledAt.IsZero() {
		t.Fatalf("reservation = %+v, %v; want settled with ch_1", r, err)
	}
	// The idem record is lost (a Redis failover in front of this
	// guardrail); the next owner's guardrail finds the committed outcome.
	if _, err := e.ForceDelete(ctx, key.ID()); err != nil {
		t.Fatal(err)
	}
	out, replayed, err := e.Do(ctx, key, charge(nil))
	if err != nil || replayed || string(out) != "ch_1" || runs != 2 {
		t.Fatalf("Do after the record was lost = %q, replayed %t, %v after %d runs; want ch_1 without running", out, replayed, err, runs)
	}
	// A panic in the work rolls its reservation back and goes on.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the work's panic did not go on")
			}
		}()
		attempt, err := e.Begin(ctx, idem.Request{Tenant: "acme", Key: "charge-2", NoFingerprint: true})
		if err != nil {
			t.Fatal(err)
		}
		defer attempt.Lease.Close()
		s.Guard(ctx, pool, attempt.Lease, func(pgx.Tx) ([]byte, error) { panic("boom") })
	}()
	if _, err := s.Reservation(ctx, pool, "acme", "charge-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("reservation after the panic = %v; want none", err)
	}
	if pgstore.ErrStaleFence != idem.ErrStaleFence {
		t.Fatal("pgstore.ErrStaleFence is not idem.ErrStaleFence")
	}
}
