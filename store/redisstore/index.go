package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
)

// The index of unsettled records (PROCESSING or UNKNOWN), which
// ListUnknown pages without scanning the store. It is a sorted set whose
// members are the records' hash tags ("len(tenant):tenant:key", score 0),
// so ZRANGEBYLEX reads one tenant's members in order. The scripts that
// acquire a record or make it UNKNOWN add it in the same atomic step;
// those that end it remove it. ListUnknown reads the records and lists the
// UNKNOWN ones and the PROCESSING ones whose lease ended (abandoned);
// entries can go stale (a record settled, or lost: a flush, a failover),
// and it drops those that
// no longer name a PROCESSING or UNKNOWN record.
//
// A script may only touch keys of one Cluster slot, and records spread
// over all of them, so on Redis Cluster there is one index per slot, each
// under a hash tag that maps to its slot; ListUnknown walks the 16384 in
// order, a pipeline of range reads at a time. On one server (or a
// Sentinel-managed primary) there is one index.

// indexMode is how a store lays out its index.
type indexMode uint8

const (
	indexSingle  indexMode = iota // one index: a server or a Sentinel-managed primary
	indexPerSlot                  // one index per Cluster slot
	indexSharded                  // a go-redis Ring: one index per shard, which ListUnknown cannot find
)

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// index names the index keys of a store.
type index struct {
	mode   indexMode
	single string // the key of the one index (indexSingle, indexSharded)
	prefix string // PREFIX + "unknown"
}

func newIndex(prefix string, mode indexMode) index {
	return index{mode: mode, single: prefix + "unknown", prefix: prefix + "unknown"}
}

// count is the number of index keys ListUnknown walks.
func (x index) count() int {
	if x.mode == indexPerSlot {
		return clusterSlots
	}
	return 1
}

// key returns the key of index number i.
func (x index) key(i int) string {
	if x.mode == indexPerSlot {
		return x.prefix + "{" + slotTags()[i] + "}"
	}
	return x.single
}

// keyOf returns the key of the index of the record at recordKey.
func (x index) keyOf(recordKey string) string {
	if x.mode == indexPerSlot {
		return x.key(redisrecord.Slot(recordKey))
	}
	return x.single
}

// slotTags returns, for each slot, the shortest decimal number (as a
// string) whose CRC16 maps to it: the hash tag of that slot's index.
var slotTags = sync.OnceValue(func() *[clusterSlots]string {
	var tags [clusterSlots]string
	for n, left := 0, clusterSlots; left > 0; n++ {
		t := strconv.Itoa(n)
		if s := redisrecord.Slot(t); tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return &tags
})

// member returns the index member of id: its record key's hash tag.
func member(id store.ID) string {
	return strconv.Itoa(len(id.Tenant)) + ":" + id.Tenant + ":" + id.Key
}

// tenantOf returns the start every member of tenant shares.
func tenantOf(tenant string) string { return strconv.Itoa(len(tenant)) + ":" + tenant + ":" }

// parseMember is the inverse of member.
func parseMember(m string) (store.ID, bool) {
	n, rest, ok := strings.Cut(m, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size >= len(rest) || rest[size] != ':' {
		return store.ID{}, false
	}
	return store.ID{Tenant: rest[:size], Key: rest[size+1:]}, true
}

// How many per-slot indexes one pipeline reads: a page starts with a few
// (a short page of a busy index needs no more) and doubles them each
// round, so walking all 16384 takes 9 rounds.
const (
	firstListBatch = 64
	maxListBatch   = 4096
)

// errBadCursor is returned by ListUnknown for an After it did not make.
var errBadCursor = fmt.Errorf("redisstore: %w", store.ErrInvalidCursor)

// ListUnknown implements store.Store. The order is that of the index
// (and, on Redis Cluster, of the slots): by tenant, then key.
func (s *Store) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	if err := s.ready(ctx); err != nil {
		return store.ListPage{}, err
	}
	if s.index.mode == indexSharded {
		return store.ListPage{}, errors.New("redisstore: ListUnknown: a go-redis Ring spreads the index over its shards; use a Cluster")
	}
	limit := p.Limit
	switch {
	case limit < 0:
		return store.ListPage{}, fmt.Errorf("redisstore: ListUnknown: negative limit %d", limit)
	case limit == 0:
		limit = store.DefaultListLimit
	case limit > store.MaxListLimit:
		limit = store.MaxListLimit
	}
	lo, hi := "-", "+"
	if !p.AllTenants {
		t := tenantOf(p.Tenant)
		lo, hi = "["+t, "("+t+"\xff" // keys are UTF-8, which never holds 0xff
	}
	i, after, err := s.parseCursor(p)
	if err != nil {
		return store.ListPage{}, err
	}
	var page store.ListPage
	for batch := firstListBatch; i < s.index.count() && len(page.Records) < limit; batch = min(2*batch, maxListBatch) {
		end := min(i+batch, s.index.count())
		keys, mins := make([]string, end-i), make([]string, end-i)
		for j := range keys {
			keys[j], mins[j] = s.index.key(i+j), lo
		}
		if after != "" {
			mins[0] = "(" + after
		}
		want := limit - len(page.Records)
		found, err := s.r.rangeByLex(ctx, keys, mins, hi, want)
		if err != nil {
			return store.ListPage{}, fmt.Errorf("redisstore: ListUnknown: %w", err)
		}
		next, nextAfter := end, ""
		for j, members := range found {
			left := limit - len(page.Records)
			if len(members) == 0 || left == 0 {
				continue
			}
			more := len(members) >= want // this index may hold more in range
			if len(members) > left {
				members, more = members[:left], true
			}
			recs, err := s.readListed(ctx, keys[j], members)
			if err != nil {
				return store.ListPage{}, err
			}
			page.Records = append(page.Records, recs...)
			if more || len(page.Records) == limit {
				next, nextAfter = i+j, members[len(members)-1]
				break
			}
		}
		i, after = next, nextAfter
	}
	if len(page.Records) == limit && i < s.index.count() {
		page.Next = strconv.Itoa(i) + ":" + after
	}
	return page, nil
}

// parseCursor returns the index number and member after which the page
// of p starts.
func (s *Store) parseCursor(p store.ListParams) (int, string, error) {
	if p.After == "" {
		return 0, "", nil
	}
	n, after, ok := strings.Cut(p.After, ":")
	i, err := strconv.Atoi(n)
	id, member := parseMember(after)
	if !ok || err != nil || i < 0 || i >= s.index.count() || !member || (!p.AllTenants && id.Tenant != p.Tenant) ||
		store.ValidateTenant(id.Tenant) != nil || store.ValidateKey(id.Key) != nil {
		return 0, "", fmt.Errorf("%w %q", errBadCursor, p.After)
	}
	return i, after, nil
}

// readListed returns the UNKNOWN records of the members of index, which
// drops the others from it (list.lua).
func (s *Store) readListed(ctx context.Context, index string, members []string) ([]store.Record, error) {
	keys := make([]string, 1, len(members)+1)
	keys[0] = index
	args := make([]any, len(members))
	for i, m := range members {
		keys = append(keys, s.prefix+"{"+m+"}")
		args[i] = m
	}
	r, err := s.r.run(ctx, listScript, keys, args)
	if err != nil {
		return nil, fmt.Errorf("redisstore: ListUnknown: %w", err)
	}
	const stride = 1 + recordFields
	if r.kind != replyArray || len(r.fields)%stride != 0 {
		return nil, fmt.Errorf("redisstore: ListUnknown: bad reply %+v", r)
	}
	recs := make([]store.Record, 0, len(r.fields)/stride)
	for f := r.fields; len(f) > 0; f = f[stride:] {
		id, ok := parseMember(f[0])
		if !ok {
			return nil, fmt.Errorf("%w: index member %q", errCorrupt, f[0])
		}
		rec, _, err := parseFields(id, f[1:stride])
		if err != nil {
			return nil, fmt.Errorf("redisstore: ListUnknown: %w", err)
		}
		recs = append(recs, rec)
	}
	return recs, nil
}
