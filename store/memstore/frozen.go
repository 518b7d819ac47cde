package memstore

import (
	"encoding/binary"
	"math/bits"
	"net/http"
	"time"

	"github.com/idemkit/idem/store"
)

// This file keeps the records no call changes any more, COMPLETED and
// EXPIRED (tombstones), until their life ends: most of a store's records,
// since a key is held for the length of a request and remembered for a
// day. The collector scans every pointer of the live heap in each cycle;
// an entry with its result's header map is a dozen objects, most of them
// full of pointers. A frozen record is a map slot whose strings, header
// and body are one byte slice: two objects without pointers to scan (its
// map key and data). A record is thawed into an entry, a copy, when a
// call reads it.

// frozen is a COMPLETED or EXPIRED record. Its map key is frozenKey(ID).
type frozen struct {
	data        []byte // owner, fingerprint, reason, label, body, header: see freeze
	fence       int64
	acquiredAt  time.Time
	completedAt time.Time
	// expires is when the record ends, in Unix nanoseconds: by the wall
	// clock, where an entry's end also has the monotonic reading; a
	// time.Time here would make the value too large for the map to hold
	// in line (128 bytes), one more object per record.
	expires  int64
	keyUntil int64 // COMPLETED: when its tombstone ends, in Unix nanoseconds; 0: none
	size     int64
	status   int
	state    store.State
}

// frozenEnd is the end of a frozen record's life, for the heap that
// drops them in order. A record deleted or replaced before its end leaves
// its frozenEnd behind, which is skipped when its time comes: frozen
// records never change their end, so one whose end differs is another.
type frozenEnd struct {
	expires int64
	key     string
}

// appendFrozenKey appends the map key of id: tenant and key, the tenant's
// length first, so that no two IDs share one.
func appendFrozenKey(b []byte, id store.ID) []byte {
	b = binary.AppendUvarint(b, uint64(len(id.Tenant)))
	return append(append(b, id.Tenant...), id.Key...)
}

// frozenKey returns the map key of id: one allocation, the string, for
// an ID that fits the buffer.
func frozenKey(id store.ID) string {
	var buf [128]byte
	return string(appendFrozenKey(buf[:0], id))
}

// idOf is the inverse of appendFrozenKey.
func idOf(key string) store.ID {
	n, k := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
	return store.ID{Tenant: key[k : k+int(n)], Key: key[k+int(n):]}
}

// freeze puts e, completed with r, in the frozen records, in place of its
// entry (the caller took it out), with the size it had.
func (s *Store) freeze(e *entry, r *store.Result) {
	fields := [...]string{e.rec.Owner, e.rec.Fingerprint, e.rec.Reason, e.rec.Label}
	n := uvarintLen(len(r.Body)+1) + len(r.Body) + uvarintLen(len(r.Header)+1)
	for _, f := range fields {
		n += uvarintLen(len(f)) + len(f)
	}
	for name, vs := range r.Header {
		n += uvarintLen(len(name)) + len(name) + uvarintLen(len(vs))
		for _, v := range vs {
			n += uvarintLen(len(v)) + len(v)
		}
	}
	b := make([]byte, 0, n) // one allocation
	for _, f := range fields {
		b = appendBytes(b, f)
	}
	// Nil and empty are told apart as the store gave them: the length
	// plus one, zero for nil.
	if r.Body == nil {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.Body))+1)
		b = append(b, r.Body...)
	}
	if r.Header == nil {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.Header))+1)
		for name, vs := range r.Header {
			b = appendBytes(b, name)
			b = binary.AppendUvarint(b, uint64(len(vs)))
			for _, v := range vs {
				b = appendBytes(b, v)
			}
		}
	}
	f := frozen{data: b, fence: e.rec.Fence, acquiredAt: e.rec.AcquiredAt, completedAt: e.rec.CompletedAt,
		expires: e.expires.UnixNano(), size: e.size, status: r.Status, state: e.rec.State}
	if !e.keyUntil.IsZero() {
		f.keyUntil = e.keyUntil.UnixNano()
	}
	s.putFrozen(frozenKey(e.rec.ID), f)
}

func (s *Store) putFrozen(key string, f frozen) {
	s.frozen[key] = f
	s.frozenEnds.push(frozenEnd{expires: f.expires, key: key})
}

// uvarintLen is the length of n as binary.AppendUvarint writes it.
func uvarintLen(n int) int { return (bits.Len64(uint64(n)|1) + 6) / 7 }

func appendBytes[T string | []byte](b []byte, v T) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// thaw returns the entry of f, a copy: its body shares f's bytes,
// which nothing changes.
func (f *frozen) thaw(id store.ID) *entry {
	d := decoder(f.data)
	e := &entry{frozen: true, size: f.size, expires: time.Unix(0, f.expires)}
	e.rec = store.Record{ID: id, State: f.state, Owner: string(d.next()), Fence: f.fence, Fingerprint: string(d.next()),
		Reason: string(d.next()), Label: string(d.next()), AcquiredAt: f.acquiredAt, CompletedAt: f.completedAt}
	if f.keyUntil != 0 {
		e.keyUntil = time.Unix(0, f.keyUntil)
	}
	e.result.Status = f.status
	if n := d.uvarint(); n > 0 {
		e.result.Body = d.take(int(n - 1))
	}
	if n := d.uvarint(); n > 0 {
		e.result.Header = make(http.Header, n-1)
		for range n - 1 {
			name := string(d.next())
			vs := make([]string, d.uvarint())
			for i := range vs {
				vs[i] = string(d.next())
			}
			e.result.Header[name] = vs
		}
	}
	e.rec.Result = &e.result
	return e
}

// decoder reads what freeze wrote.
type decoder []byte

func (d *decoder) uvarint() uint64 {
	n, k := binary.Uvarint(*d)
	*d = (*d)[k:]
	return n
}

func (d *decoder) take(n int) []byte {
	v := (*d)[:n:n]
	*d = (*d)[n:]
	return v
}

func (d *decoder) next() []byte { return d.take(int(d.uvarint())) }

// dropFrozen takes the frozen record of key out, and the bytes it counted.
func (s *Store) dropFrozen(key string, f frozen) {
	delete(s.frozen, key)
	s.charge(idOf(key).Tenant, -f.size)
}

// expireFrozen drops the frozen records whose life ended at now, putting
// in place of each COMPLETED one its tombstone (addTombstone) until its
// key retention ends.
func (s *Store) expireFrozen(now int64) {
	for len(s.frozenEnds) > 0 && now >= s.frozenEnds[0].expires {
		end := s.frozenEnds.pop()
		f, ok := s.frozen[end.key]
		if !ok || f.expires != end.expires {
			continue // deleted, or replaced by a record that ends at another time
		}
		s.dropFrozen(end.key, f)
		if f.state == store.StateCompleted && now < f.keyUntil {
			s.addTombstone(end.key, f)
		}
	}
}

// addTombstone puts in place of f, a COMPLETED record whose retention
// ended, its tombstone: the fingerprint, fence, completion time and
// status, without the header and body, until its key retention ends.
func (s *Store) addTombstone(key string, f frozen) {
	d := decoder(f.data)
	d.next() // the owner: a tombstone has none
	fingerprint, reason := d.next(), d.next()
	t := frozen{fence: f.fence, acquiredAt: f.acquiredAt, completedAt: f.completedAt, expires: f.keyUntil,
		status: f.status, state: store.StateExpired}
	t.data = appendBytes(t.data, "")
	t.data = appendBytes(t.data, fingerprint)
	t.data = appendBytes(t.data, reason)
	t.data = append(appendBytes(t.data, ""), 0, 0) // no label, body or header
	id := idOf(key)
	t.size = tombstoneOverhead + int64(len(id.Tenant)+len(id.Key)+len(fingerprint))
	s.charge(id.Tenant, t.size)
	s.putFrozen(key, t)
}

// endHeap orders frozenEnds, earliest first. It is written out rather
// than through container/heap, whose interface would box every element.
type endHeap []frozenEnd

func (h *endHeap) push(x frozenEnd) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].expires <= a[i].expires {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *endHeap) pop() frozenEnd {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a[n] = frozenEnd{}
	a = a[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && a[l].expires < a[small].expires {
			small = l
		}
		if r := l + 1; r < n && a[r].expires < a[small].expires {
			small = r
		}
		if small == i {
			break
		}
		a[i], a[small] = a[small], a[i]
		i = small
	}
	*h = a
	return top
}
