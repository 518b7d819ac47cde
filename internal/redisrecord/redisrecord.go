// Package redisrecord is what the Redis store and the layered store's
// mirror share about a record in Redis: the name of its key, the Cluster
// slot of a key, and the decoding of what their Lua scripts return.
package redisrecord

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/recordcodec"
)

// Prefix returns the prefix of a store's keys: p, or def when p is
// empty. A brace in it is an error: it would open the hash tag that Key
// puts after it, and split a record's keys over Cluster slots.
func Prefix(p, def string) (string, error) {
	if p == "" {
		return def, nil
	}
	if strings.ContainsAny(p, "{}") {
		return "", fmt.Errorf("prefix %q holds a brace, which would break the hash tag", p)
	}
	return p, nil
}

// Key returns the Redis key of the record of id under prefix. The hash tag
// {len(tenant):tenant:key} keeps every key of one record in one Cluster
// slot, and the tenant's length makes the name injective: tenant "a:b" with
// key "c" never meets tenant "a" with key "b:c".
func Key(prefix string, id store.ID) string { return SuffixedKey(prefix, id, "") }

// SuffixedKey is Key(prefix, id) + suffix, made by one concatenation (one
// allocation): a key of the record's slot, such as its tombstone's.
func SuffixedKey(prefix string, id store.ID, suffix string) string {
	return prefix + "{" + strconv.Itoa(len(id.Tenant)) + ":" + id.Tenant + ":" + id.Key + "}" + suffix
}

// Record builds the record of id from the twelve fields a script returns:
// state (P, C, U or E), owner, fence, fingerprint, acquired, completed (for
// U: when it became UNKNOWN), status, header (recordcodec.AppendHeader),
// body, the remaining TTL in ms (for U: the retention its attempt asked
// for, store.Record.Retention; an UNKNOWN record's TTL is 0, it is kept
// until settled), the reason of an UNKNOWN record and the
// label (store.Record.Label; a tombstone's is dropped). at turns
// the two timestamps into times (the Redis store counts milliseconds, the
// layered mirror microseconds). Numbers that do not parse, a header that
// does not decode and an unknown state are errors.
func Record(id store.ID, f []string, at func(int64) time.Time) (store.Record, error) {
	if len(f) != 12 {
		return store.Record{}, fmt.Errorf("%d fields, want 12", len(f))
	}
	var errs []error
	num := func(s string) int64 {
		if s == "" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		errs = append(errs, err)
		return n
	}
	rec := store.Record{ID: id, Owner: f[1], Fence: num(f[2]), Fingerprint: f[3], AcquiredAt: at(num(f[4])),
		TTL: time.Duration(num(f[9])) * time.Millisecond, Label: f[11]}
	completed, status := num(f[5]), num(f[6])
	if err := errors.Join(errs...); err != nil {
		return store.Record{}, err
	}
	switch f[0] {
	case "P":
		rec.State = store.StateProcessing
	case "C":
		h, err := recordcodec.ParseHeader([]byte(f[7]))
		if err != nil {
			return store.Record{}, err
		}
		rec.State = store.StateCompleted
		rec.CompletedAt = at(completed)
		rec.Result = &store.Result{Status: int(status), Header: h, Body: []byte(f[8])}
	case "E": // a tombstone: the status alone (redisstore's record.lua); it keeps no acquisition time
		rec.State, rec.AcquiredAt, rec.Label = store.StateExpired, time.Time{}, ""
		rec.CompletedAt = at(completed)
		rec.Result = &store.Result{Status: int(status)}
	case "U":
		rec.State = store.StateUnknown
		rec.CompletedAt = at(completed)
		rec.Reason = f[10]
		// Its field of TTL is its attempt's retention (the longer of the
		// two: the script's nominal life past the lease or the mark).
		rec.Retention, rec.KeyRetention, rec.TTL = max(rec.TTL, 0), max(rec.TTL, 0), 0
	default:
		return store.Record{}, fmt.Errorf("state %q", f[0])
	}
	return rec, nil
}

// Slot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT
// does: CRC16 (XMODEM: polynomial 0x1021, initial 0) of the hash tag (the
// part between the first '{' and the next '}', when not empty) or of the
// whole key, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
