package idemhttp

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// ErrTenantMissing is what an Options.Tenant function returns for a
// request that carries none of the credentials it scopes keys by. The
// middleware answers 400 (code tenant_missing) rather than putting the
// request in a scope shared by every anonymous client, unless
// Options.AllowAnonymous. It is idem.ErrTenantMissing, which
// idemgrpc.ErrTenantMissing is too.
var ErrTenantMissing = idem.ErrTenantMissing

// firstBodyBuffer is the most a request body gets before its bytes arrive.
// A client's Content-Length is a claim, not bytes: allocating it up front
// let 500 connections that announced 1 MiB and sent nothing grow the heap
// by 531 MB (issue 13).
const firstBodyBuffer = 8 << 10

// readAll reads r to its end, growing its buffer as the bytes arrive, at
// most to twice what arrived and never past announced+1 when the client
// announced a length (the extra byte lets the final read report io.EOF
// without growing). The caller bounds r (http.MaxBytesReader).
func readAll(r io.Reader, announced int64) ([]byte, error) {
	size := int64(firstBodyBuffer)
	if announced >= 0 {
		size = min(size, announced+1)
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			grow := max(cap(b), 512)
			if announced >= int64(len(b)) {
				grow = int(min(int64(grow), announced+1-int64(len(b))))
			}
			b = append(make([]byte, 0, len(b)+grow), b...)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// storeFull answers a request that found the store full (store.ErrStoreFull):
// 503, and the handler does not run, FailOpen or not. The store is up and
// answering, so running the handler unprotected would only trade a 503 for
// a possible double execution; the stored keys keep replaying meanwhile.
func (m *middleware) storeFull(w http.ResponseWriter, r *http.Request, err error) {
	if n, ok := m.fullLog.due(time.Now()); ok {
		m.log.Warn("idemhttp: the store is full; refusing new keys with 503 until stored results expire",
			"method", r.Method, "path", r.URL.Path, "refused_since_last_line", n, "err", err)
	}
	w.Header().Set("Retry-After", "30")
	m.writeError(w, http.StatusServiceUnavailable, CodeStoreFull,
		"the idempotency store is full; the request was not processed")
	m.report(r, OutcomeStoreFull)
}

// logEvery lets a warning that every request of a flood would repeat
// through once a second, with the count of the ones it held back: a full
// store must not also fill the disk with log lines.
type logEvery struct {
	last  atomic.Int64 // unix nanoseconds of the last line
	count atomic.Int64 // events since the last line
}

func (l *logEvery) due(now time.Time) (int64, bool) {
	l.count.Add(1)
	last := l.last.Load()
	if now.UnixNano()-last < int64(time.Second) || !l.last.CompareAndSwap(last, now.UnixNano()) {
		return 0, false
	}
	return l.count.Swap(0), true
}
