// Package storetest is the conformance suite of store.Store: every store
// must pass it, the ones in this module and any written elsewhere.
//
// The suite's cases run in parallel (t.Parallel), as River's driver suite
// does. Each case asks Harness.New for its own store and for a function
// that ages that store only: a fake clock that no other case reads, or,
// for a store whose server keeps real time, Sleep. A store on a real server
// may be shared by every case (each case uses keys of its own) or made per
// case under a prefix or schema of the case's t. The package example
// (example_test.go) is a whole harness for the memory store, each case on
// a fake clock of its own; for Redis, which keeps real time:
//
//	New: func(t *testing.T) (store.Store, func(time.Duration)) {
//		s, err := redisstore.New(client, &redisstore.Options{Prefix: "conformance:" + t.Name() + ":"})
//		if err != nil {
//			t.Fatal(err)
//		}
//		return s, storetest.Sleep
//	},
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// Harness tells the suite how to make and age a store.
type Harness struct {
	// New returns the store for one case of the suite, and advance, which
	// moves that store's clock forward by at least d. Cases run in
	// parallel: the store must not see another case's keys expire early,
	// so advance must move no clock but this store's (a fake clock per
	// store), or be Sleep for a server that keeps real time, whose clock
	// every case expects to run.
	New func(t *testing.T) (s store.Store, advance func(d time.Duration))
}

// Sleep is the advance of a store whose server keeps real time: it waits d.
func Sleep(d time.Duration) { time.Sleep(d) }

// short is the lease and retention the suite lets run out; stores must
// honour TTLs at millisecond resolution. The suite never needs such a
// lease to still hold after a store call: that would depend on how fast a
// loaded machine makes the call.
const short = 60 * time.Millisecond

// hold is a lease or retention that a case needs to still hold after a
// few store calls, and then to end: long enough for those calls on a
// loaded machine (a store on a real server keeps real time), short enough
// to wait out.
const hold = 3 * time.Second

// long is a lease or retention that never ends during a test.
const long = time.Hour

// Run runs the conformance suite against the stores h makes, each case in
// parallel with the others.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store, advance func(time.Duration))
	}{
		{"AcquireOnceUnderContention", testAcquireOnce},
		{"AcquireReturnsExistingRecord", testAcquireExisting},
		{"RepeatedAcquireBySameOwner", testRepeatedAcquire},
		{"CompleteAndReplay", testCompleteAndReplay},
		{"CompletedIsNeverOverwritten", testCompletedNotOverwritten},
		{"StaleOwnerCannotTouchTakenOverKey", testStaleOwner},
		{"WrongOwnerOrFenceIsLost", testWrongOwnerOrFence},
		{"FenceIncreases", testFenceIncreases},
		{"FenceAtLeastTheClock", testFenceClockFloor},
		{"ExtendKeepsLeaseAlive", testExtend},
		{"ExtendAfterLeaseEndFailsAndRevivesNothing", testExtendAfterExpiry},
		{"ResultExpires", testResultExpires},
		{"Release", testRelease},
		{"Delete", testDelete},
		{"DeleteByFence", testDeleteByFence},
		{"FingerprintKept", testFingerprint},
		{"TenantsAndKeysDoNotCollide", testNoCollision},
		{"LargeAndBinaryBodies", testBodies},
		{"CompleteCopiesTheCallersBuffers", testCompleteCopies},
		{"CancelledContextLeavesNoHalfRecord", testCancelled},
		{"MaxDurationKept", testMaxDuration},

		// The fourth state, UNKNOWN (unknown.go).
		{"AbandonedLeaseBecomesUnknown", testAbandonedBecomesUnknown},
		{"TakeOverReportsPreviousAttempt", testTakeOver},
		{"LateWordOfTheOwnerAccepted", testLateOwner},
		{"CompleteOfOwnUnknownRecord", testCompleteOwnUnknown},
		{"ReleaseOfOwnAbandonedRecord", testReleaseOwnAbandoned},
		{"StaleOwnerCannotMarkOrCompleteOthersRecord", testStaleOwnerUnknown},
		{"MarkUnknownIsIdempotent", testMarkUnknownIdempotent},
		{"ClaimIsExclusiveUnderContention", testClaimExclusive},
		{"ClaimEnds", testClaimEnds},
		{"ClaimOfAbandonedLease", testClaimAbandoned},
		{"ResolveCompleted", testResolveCompleted},
		{"ResolveNotExecuted", testResolveNotExecuted},
		{"ResolveErrors", testResolveErrors},
		{"ListUnknownPerTenantAndAll", testListUnknown},
		{"ListUnknownPages", testListPages},
		{"ListUnknownForgetsEndedRecords", testListForgets},
		{"AbandonedLeaseIsListed", testAbandonedLeaseIsListed},

		// Tombstones: a key outlives its result (tombstone.go).
		{"TombstoneOutlivesResult", testTombstone},
		{"NoTombstoneWithoutKeyRetention", testNoTombstoneWithoutKeyRetention},
		{"DeleteRemovesTombstone", testDeleteTombstone},
		{"ResolvedKeepsTombstone", testResolvedKeepsTombstone},
		{"UnsettledNeverExpires", testUnsettledNeverExpires},

		// What operators ask (admin.go) and see (label.go).
		{"ListUnknownRefusesForeignCursors", testListBadCursor},
		{"LabelKeptThroughEveryChange", testLabelKept},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, advance := h.New(t)
			tc.fn(t, s, advance)
		})
	}
}

func newID(t *testing.T) store.ID {
	return store.ID{Tenant: "tenant-" + rand.Text()[:6], Key: "key-" + rand.Text()[:10]}
}

// acquire acquires id for a new owner; the record outlives its lease by long.
func acquire(t *testing.T, s store.Store, id store.ID, fp string, lease time.Duration) store.AcquireResult {
	t.Helper()
	return acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: fp, LeaseDuration: lease, Retention: long})
}

func acquireWith(t *testing.T, s store.Store, p store.AcquireParams) store.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), p)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", p, err)
	}
	return res
}

// mustAcquire acquires the absent key id for a new owner, for lease; the
// record outlives the lease by long.
func mustAcquire(t *testing.T, s store.Store, id store.ID, lease time.Duration) store.LeaseRef {
	t.Helper()
	return mustAcquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: lease, Retention: long})
}

func mustAcquireWith(t *testing.T, s store.Store, p store.AcquireParams) store.LeaseRef {
	t.Helper()
	id := p.ID
	res := acquireWith(t, s, p)
	if res.Takeover != nil {
		t.Fatalf("Acquire(%v) of a key without an ended lease reports a takeover %+v", id, res.Takeover)
	}
	if !res.Acquired {
		t.Fatalf("Acquire(%v) = not acquired, record %+v; want acquired", id, res.Record)
	}
	if res.Record.State != store.StateProcessing || res.Record.Fence <= 0 || res.Record.Owner == "" {
		t.Fatalf("Acquire(%v) record = %+v; want PROCESSING with owner and positive fence", id, res.Record)
	}
	return store.LeaseRef{ID: id, Owner: res.Record.Owner, Fence: res.Record.Fence}
}

func complete(s store.Store, ref store.LeaseRef, r store.Result, retention time.Duration) error {
	return s.Complete(context.Background(), store.CompleteParams{LeaseRef: ref, Result: r, Retention: retention})
}

func get(t *testing.T, s store.Store, id store.ID) (store.Record, bool) {
	t.Helper()
	rec, err := s.Get(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, false
	}
	if err != nil {
		t.Fatalf("Get(%v): %v", id, err)
	}
	return rec, true
}

func wantLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("%s = %v; want ErrLeaseLost", what, err)
	}
}

func testAcquireOnce(t *testing.T, s store.Store, _ func(time.Duration)) {
	const n = 64
	id := newID(t)
	results, errs := atOnce(n, func(i int) (store.AcquireResult, error) {
		return s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: fmt.Sprintf("owner-%d", i), Fingerprint: "fp", LeaseDuration: long, Retention: long})
	})
	winners := 0
	var winner store.Record
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if results[i].Acquired {
			winners++
			winner = results[i].Record
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d concurrent acquisitions won; want exactly 1", winners, n)
	}
	for i := range n {
		if r := results[i]; !r.Acquired && (r.Record.Owner != winner.Owner || r.Record.Fence != winner.Fence || r.Record.State != store.StateProcessing) {
			t.Fatalf("loser %d saw %+v; want the winner's PROCESSING record (owner %s, fence %d)", i, r.Record, winner.Owner, winner.Fence)
		}
	}
}

// atOnce runs call(i) for each i below n, in n goroutines released
// together, and returns their results and errors by i.
func atOnce[R any](n int, call func(i int) (R, error)) ([]R, []error) {
	var wg sync.WaitGroup
	results := make([]R, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = call(i)
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

func testAcquireExisting(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	res := acquire(t, s, id, "fp", long)
	if res.Acquired {
		t.Fatal("second Acquire of a PROCESSING key acquired it")
	}
	r := res.Record
	if r.State != store.StateProcessing || r.Owner != ref.Owner || r.Fence != ref.Fence || r.ID != id {
		t.Fatalf("second Acquire saw %+v; want PROCESSING owner %s fence %d", r, ref.Owner, ref.Fence)
	}
	if r.TTL <= 0 || r.TTL > long {
		t.Fatalf("TTL = %v; want in (0, %v]", r.TTL, long)
	}
	// The TTL of a PROCESSING record is the rest of its lease, not of the
	// record's life, which goes on for the retention.
	id = newID(t)
	mustAcquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: hold, Retention: long})
	if r, ok := get(t, s, id); !ok || r.State != store.StateProcessing || r.TTL <= 0 || r.TTL > hold {
		t.Fatalf("Get = %+v (found %v); want PROCESSING with TTL in (0, %v], the lease left", r, ok, hold)
	}
}

// testRepeatedAcquire: an owner that repeats its Acquire (the reply of the
// first was lost) finds the key held by itself, with the first fence; the
// engine takes such a record as its own.
func testRepeatedAcquire(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	p := store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: long, Retention: long}
	first, err := s.Acquire(context.Background(), p)
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire = %+v, %v; want acquired", first, err)
	}
	again, err := s.Acquire(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if r := again.Record; r.State != store.StateProcessing || r.Owner != p.Owner || r.Fence != first.Record.Fence {
		t.Fatalf("repeated Acquire by the same owner = %+v; want its own PROCESSING record with fence %d", again, first.Record.Fence)
	}
}

func testCompleteAndReplay(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	want := store.Result{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}}, Body: []byte(`{"id":"ch_1"}`)}
	if err := complete(s, ref, want, long); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	res := acquire(t, s, id, "fp", long)
	if res.Acquired {
		t.Fatal("Acquire of a COMPLETED key acquired it")
	}
	checkCompleted(t, res.Record, want)
	if res.Record.Fence != ref.Fence {
		t.Fatalf("completed record fence = %d; want %d", res.Record.Fence, ref.Fence)
	}
	rec, ok := get(t, s, id)
	if !ok {
		t.Fatal("Get of a COMPLETED key: not found")
	}
	checkCompleted(t, rec, want)
	if rec.TTL <= long-time.Minute || rec.TTL > long {
		t.Fatalf("completed TTL = %v; want about the retention %v", rec.TTL, long)
	}
	if rec.CompletedAt.IsZero() || rec.AcquiredAt.IsZero() {
		t.Fatalf("times not kept: %+v", rec)
	}
}

func checkCompleted(t *testing.T, r store.Record, want store.Result) {
	t.Helper()
	if r.State != store.StateCompleted || r.Result == nil {
		t.Fatalf("record %+v; want COMPLETED with a result", r)
	}
	got := r.Result
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
		t.Fatalf("result = {%d %v %d bytes}; want {%d %v %d bytes}", got.Status, got.Header, len(got.Body), want.Status, want.Header, len(want.Body))
	}
}

func testCompletedNotOverwritten(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	first := store.Result{Status: 200, Body: []byte("first")}
	if err := complete(s, ref, first, long); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// The owner repeating its Complete (a retry after a lost reply) succeeds
	// and keeps the first result.
	if err := complete(s, ref, store.Result{Status: 500, Body: []byte("second")}, long); err != nil {
		t.Fatalf("repeated Complete by the same lease = %v; want nil", err)
	}
	wantLost(t, "Complete by another owner", complete(s, store.LeaseRef{ID: id, Owner: "intruder", Fence: ref.Fence + 1}, store.Result{Body: []byte("third")}, long))
	wantLost(t, "Release of a COMPLETED key", s.Release(context.Background(), ref))
	wantLost(t, "Extend of a COMPLETED key", s.Extend(context.Background(), store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: long}))
	wantLost(t, "MarkUnknown of a COMPLETED key", markUnknown(s, ref, "late", long))
	rec, _ := get(t, s, id)
	checkCompleted(t, rec, first)
}

func testStaleOwner(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	stale := mustAcquire(t, s, id, short)
	advance(2 * short)
	fresh := mustTakeOver(t, s, id, stale, long)
	wantLost(t, "stale Extend", s.Extend(context.Background(), store.ExtendParams{LeaseRef: stale, LeaseDuration: long, Retention: long}))
	wantLost(t, "stale Complete", complete(s, stale, store.Result{Body: []byte("stale")}, long))
	wantLost(t, "stale Release", s.Release(context.Background(), stale))
	wantLost(t, "stale MarkUnknown", markUnknown(s, stale, "stale", long))
	rec, ok := get(t, s, id)
	if !ok || rec.State != store.StateProcessing || rec.Owner != fresh.Owner || rec.Fence != fresh.Fence {
		t.Fatalf("after stale calls the record is %+v (found %v); want the new owner's PROCESSING record", rec, ok)
	}
	if err := complete(s, fresh, store.Result{Body: []byte("fresh")}, long); err != nil {
		t.Fatalf("new owner's Complete: %v", err)
	}
}

func testWrongOwnerOrFence(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	for _, bad := range []store.LeaseRef{
		{ID: id, Owner: "someone-else", Fence: ref.Fence},
		{ID: id, Owner: ref.Owner, Fence: ref.Fence - 1},
		{ID: id, Owner: ref.Owner, Fence: ref.Fence + 1},
		// redislock #71: a token equal to the key must not pass as the owner.
		{ID: id, Owner: id.Key, Fence: ref.Fence},
	} {
		wantLost(t, fmt.Sprintf("Extend(%+v)", bad), s.Extend(context.Background(), store.ExtendParams{LeaseRef: bad, LeaseDuration: long, Retention: long}))
		wantLost(t, fmt.Sprintf("Complete(%+v)", bad), complete(s, bad, store.Result{}, long))
		wantLost(t, fmt.Sprintf("Release(%+v)", bad), s.Release(context.Background(), bad))
		wantLost(t, fmt.Sprintf("MarkUnknown(%+v)", bad), markUnknown(s, bad, "foreign", long))
	}
	rec, ok := get(t, s, id)
	if !ok || rec.State != store.StateProcessing || rec.Owner != ref.Owner {
		t.Fatalf("record after foreign calls = %+v; want untouched", rec)
	}
	absent := store.LeaseRef{ID: newID(t), Owner: "x", Fence: 1}
	wantLost(t, "Complete of an absent key", complete(s, absent, store.Result{}, long))
	wantLost(t, "MarkUnknown of an absent key", markUnknown(s, absent, "x", long))
	if _, ok := get(t, s, absent.ID); ok {
		t.Fatal("MarkUnknown of an absent key created a record")
	}
}

// testExtend: a lease extended before its deadline outlives that deadline.
// The first lease is hold, not short: the Extend must reach the store
// before it ends.
func testExtend(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	ref := mustAcquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: hold, Retention: short})
	if err := s.Extend(context.Background(), store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: short}); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	advance(hold + short)
	rec, ok := get(t, s, id)
	if !ok || rec.State != store.StateProcessing || rec.Owner != ref.Owner {
		t.Fatalf("extended lease after the first deadline: %+v (found %v); want still PROCESSING", rec, ok)
	}
	if rec.TTL < long-time.Minute {
		t.Fatalf("TTL after Extend = %v; want about %v", rec.TTL, long)
	}
	if err := complete(s, ref, store.Result{Body: []byte("ok")}, long); err != nil {
		t.Fatalf("Complete after Extend: %v", err)
	}
}

// testExtendAfterExpiry: an ended lease is never renewed (redsync #147),
// whether its record is still kept or gone.
func testExtendAfterExpiry(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	kept := newID(t)
	ref := mustAcquire(t, s, kept, short) // the record outlives the lease by long
	advance(2 * short)
	wantLost(t, "Extend after the lease ended", s.Extend(ctx, store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: long}))
	if rec, ok := get(t, s, kept); !ok || rec.State != store.StateUnknown || rec.Reason != store.ReasonAbandoned {
		t.Fatalf("record after a refused Extend = %+v (found %v); want still abandoned (UNKNOWN, %q)", rec, ok, store.ReasonAbandoned)
	}
	if res := acquire(t, s, kept, "fp", long); res.Acquired || res.Record.State != store.StateUnknown {
		t.Fatalf("Acquire after a refused Extend = %+v; want the abandoned record turned UNKNOWN, not a revived lease", res)
	}

	// A record that ended: completed (its owner's word, then a late
	// repeat of it, finds nothing), its retention over.
	gone := newID(t)
	ref = mustAcquire(t, s, gone, long)
	if err := complete(s, ref, store.Result{}, short); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	advance(3 * short)
	wantLost(t, "Extend after the record ended", s.Extend(ctx, store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: long}))
	if rec, ok := get(t, s, gone); ok {
		t.Fatalf("Extend after the record ended re-created it: %+v", rec)
	}
	wantLost(t, "Complete after the record ended", complete(s, ref, store.Result{}, long))
	wantLost(t, "MarkUnknown after the record ended", markUnknown(s, ref, "late", long))
	if rec, ok := get(t, s, gone); ok {
		t.Fatalf("Complete or MarkUnknown after the record ended created one: %+v", rec)
	}
}

// testResultExpires: a result is kept for its retention, not for the
// lease, and then ends. The result that must still be there when the other
// has gone is kept for hold, so the check does not race the store's clock.
func testResultExpires(t *testing.T, s store.Store, advance func(time.Duration)) {
	gone, kept := newID(t), newID(t)
	for id, retention := range map[store.ID]time.Duration{gone: short, kept: hold} {
		ref := mustAcquire(t, s, id, long)
		if err := complete(s, ref, store.Result{Status: 200}, retention); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	advance(2 * short)
	if rec, ok := get(t, s, gone); ok {
		t.Fatalf("result after its retention = %+v; want absent", rec)
	}
	if rec, ok := get(t, s, kept); !ok || rec.State != store.StateCompleted {
		t.Fatalf("result within its retention = %+v (found %v); want COMPLETED", rec, ok)
	}
	mustAcquire(t, s, gone, long)
}

func testRelease(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	if err := s.Release(context.Background(), ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rec, ok := get(t, s, id); ok {
		t.Fatalf("record after Release = %+v; want absent", rec)
	}
	wantLost(t, "second Release", s.Release(context.Background(), ref))
	next := mustAcquire(t, s, id, long)
	wantLost(t, "Release by the released owner after a new acquisition", s.Release(context.Background(), ref))
	if rec, ok := get(t, s, id); !ok || rec.Owner != next.Owner {
		t.Fatalf("record = %+v; want the new owner's", rec)
	}
}

func testDelete(t *testing.T, s store.Store, _ func(time.Duration)) {
	ctx := context.Background()
	done := newID(t)
	ref := mustAcquire(t, s, done, long)
	if err := complete(s, ref, store.Result{Status: 200}, long); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: done}); err != nil || !ok {
		t.Fatalf("Delete(completed) = %v, %v; want true, nil", ok, err)
	}
	if _, ok := get(t, s, done); ok {
		t.Fatal("completed record survived Delete")
	}
	running := newID(t)
	ref = mustAcquire(t, s, running, long)
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: running}); err != nil || !ok {
		t.Fatalf("Delete(processing) = %v, %v; want true, nil", ok, err)
	}
	wantLost(t, "Complete after Delete", complete(s, ref, store.Result{}, long))
	if _, ok := get(t, s, running); ok {
		t.Fatal("Complete after Delete re-created the record")
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: newID(t)}); err != nil || ok {
		t.Fatalf("Delete(absent) = %v, %v; want false, nil", ok, err)
	}
}

func testFingerprint(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	res := acquire(t, s, id, "fp-one", long)
	if !res.Acquired || res.Record.Fingerprint != "fp-one" {
		t.Fatalf("Acquire = %+v; want acquired with fingerprint fp-one", res)
	}
	res = acquire(t, s, id, "fp-two", long)
	if res.Acquired || res.Record.Fingerprint != "fp-one" {
		t.Fatalf("Acquire with another fingerprint = %+v; want not acquired, stored fingerprint fp-one", res)
	}
	ref := store.LeaseRef{ID: id, Owner: res.Record.Owner, Fence: res.Record.Fence}
	if err := complete(s, ref, store.Result{Status: 200}, long); err != nil {
		t.Fatal(err)
	}
	if rec, _ := get(t, s, id); rec.Fingerprint != "fp-one" {
		t.Fatalf("completed fingerprint = %q; want fp-one", rec.Fingerprint)
	}
}

func testNoCollision(t *testing.T, s store.Store, _ func(time.Duration)) {
	suffix := rand.Text()[:6]
	a := store.ID{Tenant: "a:b" + suffix, Key: "c"}
	b := store.ID{Tenant: "a", Key: "b" + suffix + ":c"}
	c := store.ID{Tenant: "", Key: "a:b" + suffix + ":c"}
	d := store.ID{Tenant: "a}{b" + suffix, Key: "c}"}
	for _, id := range []store.ID{a, b, c, d} {
		mustAcquire(t, s, id, long)
	}
}

func testBodies(t *testing.T, s store.Store, _ func(time.Duration)) {
	big := make([]byte, 4<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	binary := make([]byte, 0, 512)
	for i := range 512 {
		binary = append(binary, byte(i))
	}
	for name, body := range map[string][]byte{"4MiB": big, "binary": binary, "empty": {}} {
		t.Run(name, func(t *testing.T) {
			id := newID(t)
			ref := mustAcquire(t, s, id, long)
			want := store.Result{Status: 200, Header: http.Header{"Content-Type": {"application/octet-stream"}, "X-Nul": {"a\x00b"}}, Body: body}
			if err := complete(s, ref, want, long); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			rec, _ := get(t, s, id)
			checkCompleted(t, rec, want)
		})
	}
}

// testCompleteCopies: a caller may reuse its header and body once Complete
// has returned (the middleware pools them); the stored result must not change.
func testCompleteCopies(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	body := []byte("original body")
	header := http.Header{"Content-Type": {"text/plain"}}
	if err := complete(s, ref, store.Result{Status: 201, Header: header, Body: body}, long); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	copy(body, "OVERWRITTEN!!")
	header["Content-Type"][0] = "application/evil"
	header.Set("X-Extra", "1")
	rec, _ := get(t, s, id)
	checkCompleted(t, rec, store.Result{Status: 201, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("original body")})
}

func testCancelled(t *testing.T, s store.Store, _ func(time.Duration)) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	id := newID(t)
	if _, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: long, Retention: long}); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded")
	}
	if rec, ok := get(t, s, id); ok && (rec.State != store.StateProcessing || rec.Owner != "o" || rec.Fence <= 0) {
		t.Fatalf("cancelled Acquire left a half record %+v", rec)
	}
	id = newID(t)
	ref := mustAcquire(t, s, id, long)
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200, Body: []byte("x")}, Retention: long}); err == nil {
		t.Fatal("Complete with a cancelled context succeeded")
	}
	rec, ok := get(t, s, id)
	switch {
	case !ok:
		t.Fatal("cancelled Complete removed the record")
	case rec.State == store.StateProcessing && rec.Owner == ref.Owner && rec.Result == nil:
	case rec.State == store.StateCompleted && rec.Result != nil && string(rec.Result.Body) == "x":
	default:
		t.Fatalf("cancelled Complete left a half record %+v", rec)
	}
}

// testMaxDuration: a lease, a retention and a key retention of
// store.MaxDuration are kept as any other: the key stays taken while the
// lease runs, and its result is replayed after, never acquired again.
func testMaxDuration(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp",
		LeaseDuration: store.MaxDuration, Retention: store.MaxDuration, KeyRetention: store.MaxDuration})
	if res := acquire(t, s, id, "fp", long); res.Acquired || res.Record.State != store.StateProcessing {
		t.Fatalf("Acquire while a lease of MaxDuration runs = acquired %v, %v; want the PROCESSING record", res.Acquired, res.Record.State)
	}
	want := store.Result{Status: 201, Body: []byte("charged")}
	if err := s.Complete(context.Background(), store.CompleteParams{LeaseRef: ref, Result: want, Retention: store.MaxDuration,
		KeyRetention: store.MaxDuration}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	res := acquire(t, s, id, "fp", long)
	if res.Acquired {
		t.Fatal("Acquire of a key completed with a retention of MaxDuration acquired it")
	}
	checkCompleted(t, res.Record, want)
}
