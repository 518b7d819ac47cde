package idemhttp

import (
	"fmt"
	"net/http"
	"time"
)

// The headers of OASIS Repeatable Requests v1.0, which the Azure REST API
// guidelines use and Azure's SDKs send (Options.Repeatability).
const (
	// HeaderRepeatabilityID is a client's key, an alternative to
	// Idempotency-Key.
	HeaderRepeatabilityID = "Repeatability-Request-ID"
	// HeaderRepeatabilityFirstSent is when the client first sent the
	// request (an HTTP-date): a request older than the server tracks keys
	// gets 412 first_sent_stale, since its key may have been forgotten.
	HeaderRepeatabilityFirstSent = "Repeatability-First-Sent"
	// HeaderRepeatabilityResult answers "accepted" when the response is
	// the request's own (it ran, or its stored response is replayed) and
	// "rejected" when it was refused as a repeat (first_sent_stale,
	// key_mismatch, key_expired).
	HeaderRepeatabilityResult = "Repeatability-Result"
)

// CodeFirstSentStale (412): the request's Repeatability-First-Sent is
// older than the server keeps keys: an earlier send may have run and been
// forgotten, so it is not run.
const CodeFirstSentStale = "first_sent_stale"

// repeatable is what a request's repeatability headers say.
type repeatable struct {
	firstSent time.Time // zero: the request is keyed by Idempotency-Key
}

// keyOf returns the request's key: its Idempotency-Key, or with
// Repeatability on, its Repeatability-Request-ID, which then needs a
// Repeatability-First-Sent. Both key headers naming two different keys
// are an error: which request is this?
func (m *middleware) keyOf(r *http.Request) (string, repeatable, error) {
	key, err := KeyFromHeader(r.Header)
	ids := r.Header.Values(HeaderRepeatabilityID) // canonical: Repeatability-Request-Id
	if !m.repeatability || len(ids) == 0 {
		return key, repeatable{}, err
	}
	if err != nil && err != ErrNoKey {
		return "", repeatable{}, err
	}
	id, idErr := KeyFromHeader(http.Header{HeaderKey: ids})
	switch {
	case idErr != nil:
		return "", repeatable{}, fmt.Errorf("%w (in %s)", idErr, HeaderRepeatabilityID)
	case err == nil && id != key:
		return "", repeatable{}, fmt.Errorf("%w: %s and %s name different keys", ErrBadKey, HeaderKey, HeaderRepeatabilityID)
	}
	sent := r.Header.Values(HeaderRepeatabilityFirstSent)
	if len(sent) != 1 {
		return "", repeatable{}, fmt.Errorf("%w: %s needs one %s header, got %d", ErrBadKey, HeaderRepeatabilityID, HeaderRepeatabilityFirstSent, len(sent))
	}
	t, perr := http.ParseTime(sent[0])
	if perr != nil {
		return "", repeatable{}, fmt.Errorf("%w: %s %q is not an HTTP-date", ErrBadKey, HeaderRepeatabilityFirstSent, sent[0])
	}
	return id, repeatable{firstSent: t}, nil
}

// stale reports whether a request first sent at rp.firstSent is older than
// the keys are kept for: its first send may have run and been forgotten.
func (rp repeatable) stale(keyRetention time.Duration) bool {
	return !rp.firstSent.IsZero() && time.Since(rp.firstSent) > keyRetention
}

// mark sets Repeatability-Result on a repeatable request's answer.
func (rp repeatable) mark(w http.ResponseWriter, result string) {
	if !rp.firstSent.IsZero() {
		w.Header().Set(HeaderRepeatabilityResult, result)
	}
}
