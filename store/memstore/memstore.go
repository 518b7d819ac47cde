package memstore

import (
	"container/heap"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Clock returns the current time. Nil means time.Now. Tests inject a
	// fake clock to expire leases and results without sleeping.
	Clock func() time.Time
	// MaxBytes bounds the memory the records take, counted as the sizes of
	// keys, fingerprints, headers and bodies plus a fixed overhead per
	// record. Zero means 256 MiB.
	MaxBytes int64
}

// recordOverhead approximates the bytes a record costs beyond its strings.
const recordOverhead = 256

// Store is an in-memory idem.Store. It is safe for concurrent use.
type Store struct {
	now      func() time.Time
	maxBytes int64

	mu         sync.Mutex
	entries    map[idem.ID]*entry
	processing expiryHeap // PROCESSING records by lease deadline
	completed  expiryHeap // COMPLETED records by end of retention
	bytes      int64
	lastFence  int64
}

type entry struct {
	rec       idem.Record // TTL unused: derived from expires
	result    idem.Result // COMPLETED: rec.Result points here; never changed once set
	expires   time.Time
	size      int64
	heapIndex int
}

// New returns an empty store.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxBytes < 0 {
		return nil, errors.New("memstore: negative MaxBytes")
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 256 << 20
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Store{now: o.Clock, maxBytes: o.MaxBytes, entries: make(map[idem.ID]*entry)}, nil
}

// Acquire implements idem.Store.
func (s *Store) Acquire(ctx context.Context, p idem.AcquireParams) (idem.AcquireResult, error) {
	if err := ctx.Err(); err != nil {
		return idem.AcquireResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	if e, ok := s.entries[p.ID]; ok {
		return idem.AcquireResult{Record: e.view(now)}, nil
	}
	size := recordOverhead + int64(len(p.Tenant)+len(p.Key)+len(p.Owner)+len(p.Fingerprint))
	if !s.makeRoom(size) {
		return idem.AcquireResult{}, idem.ErrStoreFull
	}
	// The fence counter is global, so it increases for every key; the
	// clock floor keeps it increasing across restarts of the process.
	s.lastFence = max(s.lastFence+1, now.UnixMicro())
	e := &entry{
		rec: idem.Record{ID: p.ID, State: idem.StateProcessing, Owner: p.Owner, Fence: s.lastFence,
			Fingerprint: p.Fingerprint, AcquiredAt: now},
		expires: now.Add(p.LeaseDuration),
		size:    size,
	}
	s.entries[p.ID] = e
	s.bytes += size
	heap.Push(&s.processing, e)
	return idem.AcquireResult{Acquired: true, Record: e.view(now)}, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	e, ok := s.entries[p.ID]
	if !ok || e.rec.Owner != p.Owner || e.rec.Fence != p.Fence {
		return idem.ErrLeaseLost
	}
	if e.rec.State == idem.StateCompleted {
		return nil // a repeated Complete of the same lease: keep the first result
	}
	grow := int64(len(p.Result.Body)) + headerSize(p.Result.Header)
	heap.Remove(&s.processing, e.heapIndex) // not evictable while making room
	if !s.makeRoom(grow) {
		heap.Push(&s.processing, e)
		return idem.ErrStoreFull
	}
	e.rec.State = idem.StateCompleted
	e.rec.CompletedAt = now
	// Copies: the caller may reuse its header and body once Complete returns.
	e.result = idem.Result{Status: p.Result.Status, Header: p.Result.Header.Clone(), Body: clone(p.Result.Body)}
	e.rec.Result = &e.result
	e.expires = now.Add(p.Retention)
	e.size += grow
	s.bytes += grow
	heap.Push(&s.completed, e)
	return nil
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, p idem.ExtendParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	e, ok := s.processingEntry(p.LeaseRef)
	if !ok {
		return idem.ErrLeaseLost
	}
	e.expires = now.Add(p.LeaseDuration)
	heap.Fix(&s.processing, e.heapIndex)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, p idem.LeaseRef) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.now())
	e, ok := s.processingEntry(p)
	if !ok {
		return idem.ErrLeaseLost
	}
	s.remove(e)
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	e, ok := s.entries[id]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return e.view(now), nil
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, id idem.ID) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(s.now())
	e, ok := s.entries[id]
	if ok {
		s.remove(e)
	}
	return ok, nil
}

func (s *Store) processingEntry(ref idem.LeaseRef) (*entry, bool) {
	e, ok := s.entries[ref.ID]
	if !ok || e.rec.State != idem.StateProcessing || e.rec.Owner != ref.Owner || e.rec.Fence != ref.Fence {
		return nil, false
	}
	return e, true
}

// expire drops every record whose lease or retention ended by now.
func (s *Store) expire(now time.Time) {
	for _, h := range []*expiryHeap{&s.processing, &s.completed} {
		for h.Len() > 0 && !now.Before((*h)[0].expires) {
			s.remove((*h)[0])
		}
	}
}

// makeRoom evicts COMPLETED records, soonest to expire first, until size
// more bytes fit, and reports whether they do.
func (s *Store) makeRoom(size int64) bool {
	for s.bytes+size > s.maxBytes && s.completed.Len() > 0 {
		s.remove(s.completed[0])
	}
	return s.bytes+size <= s.maxBytes
}

func (s *Store) remove(e *entry) {
	if e.rec.State == idem.StateProcessing {
		heap.Remove(&s.processing, e.heapIndex)
	} else {
		heap.Remove(&s.completed, e.heapIndex)
	}
	delete(s.entries, e.rec.ID)
	s.bytes -= e.size
}

// view returns a copy of the record that the caller may keep. Its Result
// is the stored one, shared and read-only as idem.Record documents: the
// store never changes a result once it is stored, so a replay costs no copy.
func (e *entry) view(now time.Time) idem.Record {
	r := e.rec
	r.TTL = e.expires.Sub(now)
	return r
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func headerSize(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	return n
}

// expiryHeap orders entries by expiry, earliest first.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.heapIndex = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

var _ idem.Store = (*Store)(nil)
