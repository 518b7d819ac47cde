package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
)

// NearCacheStats counts what the near cache did (Options.NearCache), since
// the store was made.
type NearCacheStats struct {
	// Hits are replays served from process memory, with no round trip.
	Hits uint64
	// Misses are cached reads that went to Redis: the first replay of a
	// key after it was seen COMPLETED, or one after an invalidation. Each
	// takes one round trip, in place of the acquire script's.
	Misses uint64
	// Stale are cached reads whose record was not the COMPLETED one this
	// process had seen (deleted, expired, or an older record whose
	// invalidation had not arrived yet): the store ran the script instead.
	Stale uint64
	// Invalidations are keys Redis told the client to drop (a write by
	// any client, an expiry, an eviction), counted only when the store
	// built the client (OpenURL); nil invalidations (a flush of the whole
	// cache: a reconnect, FLUSHALL) count once.
	Invalidations uint64
}

// nearCacheKeys bounds the set of keys seen COMPLETED: about 100 bytes
// each. When it is full a key picked by the map's iteration order makes
// room; a key that falls out only costs its replays the script's round
// trip, as without the cache.
const nearCacheKeys = 1 << 17

// nearCacheMargin is how long before the end of a record's retention the
// cache stops serving it: it covers the time from the server's PTTL to
// the client's reading of the reply, and the millisecond rounding of the
// key's expiry.
const nearCacheMargin = time.Second

// nearCacheTTL is the client-side TTL asked of DoCache: longer than any
// key lives, so that the cached entry ends with the key's own PTTL, from
// which the store reads how much retention is left (see completed).
const nearCacheTTL = 100 * 365 * 24 * time.Hour

// nearCache serves COMPLETED records from the rueidis client's
// server-assisted cache (RESP3 CLIENT TRACKING). Only keys this process
// saw COMPLETED are read through it, so a new key (the first request)
// pays no extra round trip: its acquire runs the script as without the
// cache. docs/redis-internals.md has the correctness argument.
type nearCache struct {
	c     rueidis.Client
	grace time.Duration // how long a key outlives its record: fenceGraceMs

	mu   sync.Mutex
	seen map[string]int64 // guarded by mu: record key -> fence of the COMPLETED record seen
	// removals counts the removals through this store (Delete, Resolve),
	// each twice: before its script and after it. Written under mu.
	removals atomic.Uint64

	hits, misses, stale, invalidations atomic.Uint64
}

func newNearCache(c rueidis.Client) *nearCache {
	return &nearCache{c: c, grace: time.Duration(fenceGraceMs) * time.Millisecond, seen: map[string]int64{}}
}

// mark returns what saw needs to know that no removal came in between:
// take it before sending the script whose reply saw notes.
func (n *nearCache) mark() uint64 { return n.removals.Load() }

// saw notes that the record at key is COMPLETED with fence, as a script
// sent after mark was taken answered, unless a removal through this store
// began or ended since. Such a reply may have been read before the
// removal ran and be handled after it returned; noted, it would have the
// next replays served from the cached copy, which stays until this client
// reads the removal's invalidation (milliseconds on a loaded host: issue
// 22). Not noting it costs the key's next replay the script, which notes
// it then. The mark is one counter for all keys: removals are rare, and a
// map of recent removals per key would need a bound of its own.
func (n *nearCache) saw(key string, fence int64, mark uint64) {
	n.mu.Lock()
	if n.removals.Load() != mark {
		n.mu.Unlock()
		return
	}
	if _, ok := n.seen[key]; !ok && len(n.seen) >= nearCacheKeys {
		for k := range n.seen {
			delete(n.seen, k)
			break
		}
	}
	n.seen[key] = fence
	n.mu.Unlock()
}

// forget drops key: its next read runs the script.
func (n *nearCache) forget(key string) {
	n.mu.Lock()
	delete(n.seen, key)
	n.mu.Unlock()
}

// removing forgets key for a removal through this store (Delete,
// Resolve), before its script and again after it, and makes saw ignore
// the replies to scripts sent before (see saw).
func (n *nearCache) removing(key string) {
	n.mu.Lock()
	n.removals.Add(1)
	delete(n.seen, key)
	n.mu.Unlock()
}

func (n *nearCache) fenceOf(key string) (int64, bool) {
	n.mu.Lock()
	f, ok := n.seen[key]
	n.mu.Unlock()
	return f, ok
}

// completed returns the record of id at key when this process saw it
// COMPLETED and the cached read still finds that record (same fence)
// with retention left. Anything else (an error included) answers false
// and the caller runs its script, which decides as without the cache.
func (n *nearCache) completed(ctx context.Context, id store.ID, key string) (store.Record, bool) {
	fence, ok := n.fenceOf(key)
	if !ok {
		return store.Record{}, false
	}
	msg, err := n.c.DoCache(ctx, n.c.B().Get().Key(key).Cache(), nearCacheTTL).ToMessage()
	if err != nil {
		n.forget(key)
		return store.Record{}, false
	}
	if msg.IsCacheHit() {
		n.hits.Add(1)
	} else {
		n.misses.Add(1)
	}
	raw, err := msg.ToString()
	// The key lives grace past its record (complete.lua and resolve.lua
	// set PX retention+grace with the record's end at now+retention), and
	// the cached entry ends with the key: what is left of the retention
	// is the entry's PTTL less grace.
	left := time.Duration(msg.CachePTTL())*time.Millisecond - n.grace
	if err != nil || left <= nearCacheMargin {
		n.stale.Add(1)
		n.forget(key)
		return store.Record{}, false
	}
	rec, ok := decodeCompleted(id, raw, left)
	if !ok || rec.Fence != fence {
		n.stale.Add(1)
		n.forget(key)
		return store.Record{}, false
	}
	return rec, true
}

func (n *nearCache) stats() NearCacheStats {
	return NearCacheStats{Hits: n.hits.Load(), Misses: n.misses.Load(), Stale: n.stale.Load(),
		Invalidations: n.invalidations.Load()}
}

// countInvalidations is a rueidis.ClientOption.OnInvalidations that
// counts for n.
func (n *nearCache) countInvalidations(keys []rueidis.RedisMessage) {
	if keys == nil {
		n.invalidations.Add(1)
		return
	}
	n.invalidations.Add(uint64(len(keys)))
}

// decodeCompleted decodes a COMPLETED record string (record.lua: struct
// '>c1dI4c0I4c0I4c0dddI4c0I4c0I4c0': 'C', end ms, fence, owner,
// fingerprint, acquired ms, completed ms, status, header, body, and the
// label, which a record written before it existed lacks) with left of its
// retention. Any other state, or bytes that do not decode, answer false.
func decodeCompleted(id store.ID, raw string, left time.Duration) (store.Record, bool) {
	d := recordDecoder{s: raw}
	if st := d.bytes(1); st != "C" {
		return store.Record{}, false
	}
	d.num() // the end of the retention, on the server's clock: left says it
	fence, owner, fp := d.str(), d.str(), d.str()
	acquired, completed, status := d.num(), d.num(), d.num()
	header, body := d.str(), d.str()
	var label string
	if d.s != "" {
		label = d.str()
	}
	if d.bad || d.s != "" {
		return store.Record{}, false
	}
	f := []string{"C", owner, fence, fp, ms(acquired), ms(completed), ms(status), header, body,
		strconv.FormatInt(left.Milliseconds(), 10), "", label}
	rec, err := redisrecord.Record(id, f, time.UnixMilli)
	return rec, err == nil
}

func ms(f float64) string { return strconv.FormatInt(int64(math.Round(f)), 10) }

// recordDecoder reads the fields of a struct.pack'ed record; a read past
// the end sets bad.
type recordDecoder struct {
	s   string
	bad bool
}

func (d *recordDecoder) bytes(n int) string {
	if n < 0 || n > len(d.s) {
		d.bad, d.s = true, ""
		return ""
	}
	v := d.s[:n]
	d.s = d.s[n:]
	return v
}

func (d *recordDecoder) num() float64 {
	b := d.bytes(8)
	if len(b) != 8 {
		return 0
	}
	return math.Float64frombits(binary.BigEndian.Uint64([]byte(b)))
}

func (d *recordDecoder) str() string {
	b := d.bytes(4)
	if len(b) != 4 {
		return ""
	}
	return d.bytes(int(binary.BigEndian.Uint32([]byte(b))))
}
