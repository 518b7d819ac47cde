package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/recordcodec"
)

// parseAcquired decodes acquire.lua's reply to a successful acquisition:
// "fence:acquired_ms", followed by ":previous_fence:previous_acquired_ms"
// for a takeover.
func parseAcquired(s string) (fence, acquiredMs int64, took *store.Takeover, err error) {
	var n [4]int64
	fields, rest := 0, s
	for ; err == nil && fields < len(n); fields++ {
		f, more, found := strings.Cut(rest, ":")
		n[fields], err = strconv.ParseInt(f, 10, 64)
		if rest = more; !found {
			fields++
			break
		}
	}
	if err != nil || rest != "" && fields == len(n) || (fields != 2 && fields != 4) {
		return 0, 0, nil, fmt.Errorf("%w: acquire reply %q", errCorrupt, s)
	}
	if fields == 4 {
		took = &store.Takeover{Fence: n[2], AcquiredAt: time.UnixMilli(n[3])}
	}
	return n[0], n[1], took, nil
}

// errCorrupt reports a record that does not decode.
var errCorrupt = errors.New("redisstore: corrupt record")

// recordFields is how many fields a record's reply has (see reply in record.lua).
const recordFields = 13

// parseRecord decodes a record's reply: {'0' (claim.lua: '1' when
// claimed), state, owner, fence, fingerprint, acquired_ms, completed_ms,
// status, header, body, ttl_ms, reason, label}.
func parseRecord(id store.ID, r reply) (rec store.Record, claimed bool, err error) {
	if r.kind != replyArray {
		return store.Record{}, false, fmt.Errorf("%w: reply %+v", errCorrupt, r)
	}
	return parseFields(id, r.fields)
}

func parseFields(id store.ID, f []string) (store.Record, bool, error) {
	if len(f) != recordFields || (f[0] != "0" && f[0] != "1") {
		return store.Record{}, false, fmt.Errorf("%w: %d fields", errCorrupt, len(f))
	}
	rec, err := redisrecord.Record(id, f[1:], time.UnixMilli)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return rec, f[0] == "1", nil
}

// encodeHeader is recordcodec.AppendHeader into a buffer allocated once,
// at a size that holds it.
func encodeHeader(h http.Header) []byte {
	if len(h) == 0 {
		return nil
	}
	n := binary.MaxVarintLen64
	for name, vs := range h {
		n += len(name) + 2*binary.MaxVarintLen64
		for _, v := range vs {
			n += len(v) + binary.MaxVarintLen64
		}
	}
	return recordcodec.AppendHeader(make([]byte, 0, n), h)
}
