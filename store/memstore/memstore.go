package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/listcursor"
	"github.com/idemkit/idem/store"
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Clock returns the current time. Nil means time.Now. Tests inject a
	// fake clock to expire leases and results without sleeping.
	Clock func() time.Time
	// MaxBytes bounds the memory the records take, counted as the sizes of
	// keys, fingerprints, reasons, headers and bodies plus a fixed overhead
	// per record. A store at the bound refuses new keys; see Store.Complete
	// for why a key it admitted may still complete past it. Zero means 256 MiB.
	MaxBytes int64
	// TenantShare is the fraction of MaxBytes that one tenant's records
	// may take, so that one tenant cannot fill the store for all: a tenant
	// at its share gets store.ErrStoreFull for its new keys while the other
	// tenants keep acquiring. Zero means DefaultTenantShare (a quarter); 1
	// lets one tenant take the whole store, for a process with a single
	// tenant. A result completed past the share counts against its tenant
	// only: the bound counts each tenant's records up to its share.
	TenantShare float64
}

// errBadCursor is returned by ListUnknown for an After it did not make.
var errBadCursor = fmt.Errorf("memstore: %w", store.ErrInvalidCursor)

// errNotMade is returned by every method of a Store that New did not make
// (a zero Store, or a nil *Store), instead of panicking on what New sets
// up.
var errNotMade = errors.New("memstore: Store not made with New: a zero or nil *Store has no map of records")

// made returns errNotMade for a Store that New did not make.
func (s *Store) made() error {
	if s == nil || s.entries == nil {
		return errNotMade
	}
	return nil
}

// Store is an in-memory store.Store. It is safe for concurrent use.
type Store struct {
	now         func() time.Time
	maxBytes    int64
	tenantBytes int64 // MaxBytes × TenantShare

	mu sync.Mutex
	// entries holds the records that calls still change, PROCESSING and
	// UNKNOWN; frozen the COMPLETED and EXPIRED ones (frozen.go). So
	// entries is also the index ListUnknown reads: the records whose
	// outcome is or may become unknown, so that it lists a lease that
	// ended with nobody left to finish it (a crashed owner) as soon as it
	// ends, and reads no COMPLETED record. An entry never ends by time:
	// only settling (Complete, Release, Resolve, Delete) takes it out.
	entries    map[store.ID]*entry
	frozen     map[string]frozen
	frozenEnds endHeap
	// byTenant holds the bytes of each tenant's records; a tenant without
	// records has no entry. counted is what the bound counts: the sum of
	// each tenant's bytes up to tenantBytes.
	byTenant  map[string]int64
	counted   int64
	lastFence int64
}

// New returns an empty store.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.MaxBytes < 0:
		return nil, errors.New("memstore: negative MaxBytes")
	case math.IsNaN(o.TenantShare) || o.TenantShare < 0 || o.TenantShare > 1:
		return nil, fmt.Errorf("memstore: TenantShare %v: want a fraction of MaxBytes, above 0 and at most 1 (0 for the default, %v)", o.TenantShare, DefaultTenantShare)
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 256 << 20
	}
	if o.TenantShare == 0 {
		o.TenantShare = DefaultTenantShare
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Store{now: o.Clock, maxBytes: o.MaxBytes, tenantBytes: int64(float64(o.MaxBytes) * o.TenantShare),
		entries: make(map[store.ID]*entry), frozen: make(map[string]frozen), byTenant: make(map[string]int64)}, nil
}

// Close does nothing: the store holds nothing but memory. Every store of
// this module has a Close that releases what the store opened, so that a
// program closes whichever it runs on alike.
func (s *Store) Close() error { return s.made() }

// lock takes the store's lock, drops the COMPLETED and EXPIRED records
// whose life ended (PROCESSING and UNKNOWN ones never end by time), and
// returns the time the call works at.
func (s *Store) lock() time.Time {
	s.mu.Lock()
	now := s.now()
	s.expireFrozen(now.UnixNano())
	return now
}

// find returns the record of id: its entry, or a copy of its frozen
// record, which the caller only reads or removes.
func (s *Store) find(id store.ID) (*entry, bool) {
	if e, ok := s.entries[id]; ok {
		return e, true
	}
	var buf [128]byte
	f, ok := s.frozen[string(appendFrozenKey(buf[:0], id))]
	if !ok {
		return nil, false
	}
	return f.thaw(id), true
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := s.made(); err != nil {
		return store.AcquireResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.AcquireResult{}, err
	}
	now := s.lock()
	defer s.mu.Unlock()
	var takeover *store.Takeover
	old, ok := s.find(p.ID)
	if ok {
		if !old.abandoned(now) {
			return store.AcquireResult{Record: old.view(now)}, nil
		}
		// Only the same request takes over its ended attempt; for any
		// other the attempt's outcome is unknown, and stays so once seen.
		if !p.TakeOver || old.rec.Fingerprint != p.Fingerprint {
			s.toUnknown(old, now, store.ReasonAbandoned)
			return store.AcquireResult{Record: old.view(now)}, nil
		}
		takeover = &store.Takeover{Fence: old.rec.Fence, AcquiredAt: old.rec.AcquiredAt}
	}
	size := recordOverhead + int64(len(p.Tenant)+len(p.Key)+len(p.Owner)+len(p.Fingerprint)+len(p.Label))
	need := size
	if ok {
		need -= old.size // a takeover replaces the record: only the difference is new
	}
	if err := s.admit(p.Tenant, need); err != nil {
		// Expired records are gone already (lock); every record left is a
		// lease, held or ended, an UNKNOWN key (kept until settled), or a
		// result within its retention, and dropping one would let its
		// retry run again. Refuse the new key.
		return store.AcquireResult{}, err
	}
	if ok {
		s.remove(old)
	}
	// The fence counter is global, so it increases for every key; the
	// clock floor keeps it increasing across restarts of the process.
	s.lastFence = max(s.lastFence+1, now.UnixMicro())
	e := &entry{
		rec: store.Record{ID: p.ID, State: store.StateProcessing, Owner: p.Owner, Fence: s.lastFence,
			Fingerprint: p.Fingerprint, AcquiredAt: now, Label: p.Label, Retention: p.Retention, KeyRetention: p.KeyRetention},
		leaseUntil: now.Add(p.LeaseDuration),
	}
	s.add(e, size)
	return store.AcquireResult{Acquired: true, Record: e.view(now), Takeover: takeover}, nil
}

// Complete implements store.Store. It stores the result even when that takes
// its tenant past its share, or the store past MaxBytes: the work behind an
// admitted key has run, and a result refused here would be lost, so the
// retry would run it again. Reserving room at Acquire instead cannot work,
// because the size of a result is not known until it exists (a reservation
// of the largest possible result would make the bound count leases, not
// bytes). A tenant's overshoot is bounded by the leases it held when it
// filled its share times the largest result the engine lets through
// (idem.Options.MaxResultBytes); none of its new keys is admitted until
// expiry brings it back under its share, and the bound counts it at its
// share only, so the other tenants keep their room.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.owned(p.LeaseRef)
	if !ok {
		return store.ErrLeaseLost
	}
	if e.rec.State == store.StateCompleted {
		return nil // a repeated Complete of the same lease: keep the first result
	}
	// PROCESSING, its lease ended or not, or UNKNOWN: the record is still
	// the owner's (nobody took it over), however long ago its lease
	// ended (such a record never ends by time), and the owner knows the
	// outcome.
	s.toCompleted(e, now, p.Result, p.Retention, p.KeyRetention)
	return nil
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, p store.ExtendParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.owned(p.LeaseRef)
	if !ok || e.rec.State != store.StateProcessing || e.abandoned(now) {
		return store.ErrLeaseLost // an ended lease is never renewed
	}
	e.leaseUntil = now.Add(p.LeaseDuration)
	e.keepLonger(p.Retention, p.KeyRetention)
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.LeaseRef) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.owned(p)
	if !ok || !e.releasable(now) {
		return store.ErrLeaseLost
	}
	s.remove(e)
	return nil
}

// MarkUnknown implements store.Store.
func (s *Store) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.owned(p.LeaseRef)
	switch {
	case !ok || e.rec.State == store.StateCompleted:
		return store.ErrLeaseLost
	case e.rec.State == store.StateUnknown:
		return nil // a repeated MarkUnknown: keep the first reason
	}
	s.toUnknown(e, now, p.Reason)
	e.keepLonger(p.Retention, p.KeyRetention)
	return nil
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := s.made(); err != nil {
		return store.ClaimResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.ClaimResult{}, err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.find(p.ID)
	if !ok {
		return store.ClaimResult{}, store.ErrNotFound
	}
	if e.abandoned(now) {
		s.toUnknown(e, now, store.ReasonAbandoned)
	}
	if e.rec.State != store.StateUnknown || (e.claimOwner != "" && now.Before(e.claimUntil)) {
		return store.ClaimResult{Record: e.view(now)}, nil
	}
	e.claimOwner, e.claimUntil = p.Owner, now.Add(p.LeaseDuration)
	return store.ClaimResult{Claimed: true, Record: e.view(now)}, nil
}

// Resolve implements store.Store. A PROCESSING record whose lease ended,
// which Get reports UNKNOWN, resolves like one.
func (s *Store) Resolve(ctx context.Context, p store.ResolveParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.find(p.ID)
	switch {
	case !ok:
		return store.ErrNotFound
	case e.rec.State != store.StateUnknown && !e.abandoned(now):
		return store.ErrNotUnknown
	case e.rec.Fence != p.Fence:
		return store.ErrStaleFence
	case p.Claim != "" && (e.claimOwner != p.Claim || !now.Before(e.claimUntil)):
		return store.ErrLeaseLost
	}
	if p.Result == nil {
		// Known not to have run: the retry may. The fence counter is the
		// store's, so the next acquisition still gets a higher fence.
		s.remove(e)
		return nil
	}
	s.toCompleted(e, now, *p.Result, p.Retention, p.KeyRetention)
	return nil
}

// ListUnknown implements store.Store. It reads the entries only (not
// the frozen records): the UNKNOWN records and the PROCESSING ones whose lease
// ended (reported UNKNOWN, abandoned, as Get reports them) of the tenant
// (or of all tenants), sorted by tenant and key, after the cursor. Its
// cost grows with the UNKNOWN records and the leases held, not with the
// store.
func (s *Store) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	if err := s.made(); err != nil {
		return store.ListPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.ListPage{}, err
	}
	limit := p.Limit
	switch {
	case limit < 0:
		return store.ListPage{}, errors.New("memstore: negative list limit")
	case limit == 0:
		limit = store.DefaultListLimit
	case limit > store.MaxListLimit:
		limit = store.MaxListLimit
	}
	after, ok := listcursor.After(p)
	if !ok {
		return store.ListPage{}, errBadCursor
	}
	now := s.lock()
	defer s.mu.Unlock()
	var ids []store.ID
	for id, e := range s.entries {
		switch {
		case !p.AllTenants && id.Tenant != p.Tenant:
		case e.rec.State == store.StateProcessing && !e.abandoned(now): // its owner may still finish it
		case p.After == "" || compareIDs(id, after) > 0:
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, compareIDs)
	var page store.ListPage
	for _, id := range ids[:min(limit, len(ids))] {
		page.Records = append(page.Records, s.entries[id].view(now))
	}
	if len(ids) > limit {
		page.Next = listcursor.Next(ids[limit-1])
	}
	return page, nil
}

func compareIDs(a, b store.ID) int {
	return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Key, b.Key))
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id store.ID) (store.Record, error) {
	if err := s.made(); err != nil {
		return store.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Record{}, err
	}
	now := s.lock()
	defer s.mu.Unlock()
	e, ok := s.find(id)
	if !ok {
		return store.Record{}, store.ErrNotFound
	}
	return e.view(now), nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	if err := s.made(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.lock()
	defer s.mu.Unlock()
	e, ok := s.find(p.ID)
	if !ok || (p.Fence != 0 && e.rec.Fence != p.Fence) {
		return false, nil
	}
	s.remove(e)
	return true, nil
}

// owned returns the record of ref's key if ref's owner and fence made it.
func (s *Store) owned(ref store.LeaseRef) (*entry, bool) {
	e, ok := s.find(ref.ID)
	if !ok || e.rec.Owner != ref.Owner || e.rec.Fence != ref.Fence {
		return nil, false
	}
	return e, true
}

// toUnknown turns e UNKNOWN for reason, kept until settled.
func (s *Store) toUnknown(e *entry, now time.Time, reason string) {
	e.rec.State = store.StateUnknown
	e.rec.Reason = reason
	e.rec.CompletedAt = now
	s.grow(e, int64(len(reason)))
}

// toCompleted turns e, PROCESSING or UNKNOWN, COMPLETED with a copy of r,
// frozen: the caller may reuse its header and body once the call returns.
func (s *Store) toCompleted(e *entry, now time.Time, r store.Result, retention, keyRetention time.Duration) {
	delete(s.entries, e.rec.ID)
	e.rec.State = store.StateCompleted
	e.rec.CompletedAt = now
	e.rec.Retention, e.rec.KeyRetention = 0, 0
	s.grow(e, int64(len(r.Body))+headerSize(r.Header))
	e.expires = now.Add(retention)
	if keyRetention > retention {
		e.keyUntil = now.Add(keyRetention)
	}
	s.freeze(e, &r)
}

var _ store.Store = (*Store)(nil)
