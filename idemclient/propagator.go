package idemclient

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/handlerctx"
)

var (
	// ErrNoScope is returned by Propagator for a request that needs a
	// derived key when its context carries no scope (see WithScope).
	ErrNoScope = errors.New("idemclient: no idempotency scope in the request context (use WithScope, or serve the request behind idemhttp)")
	// ErrNoStep is returned by Propagator, and by Retrying and idemgrpc's
	// client interceptor under a scope, for a request that needs a derived
	// key when its context names no step (see WithStep). A request is
	// never sent without a key, or under a random one, in that case.
	ErrNoStep = errors.New("idemclient: no step name in the request context (use WithStep)")
)

type scopeKey struct{}

type stepKey struct{}

type scope struct{ tenant, key string }

// WithScope returns a context that carries the idempotency scope of the
// inbound request being served: its tenant and its Idempotency-Key. Work
// under a lease needs none (see ScopeFrom); call it anywhere else.
func WithScope(ctx context.Context, tenant, key string) context.Context {
	return context.WithValue(ctx, scopeKey{}, scope{tenant, key})
}

// ScopeFrom returns the scope WithScope put in ctx or, under a lease (a
// handler behind idemhttp or idemgrpc, a function run by idem.Engine.Do),
// the tenant and key of that lease: such work needs no WithScope of its own.
func ScopeFrom(ctx context.Context) (tenant, key string, ok bool) {
	if s, ok := ctx.Value(scopeKey{}).(scope); ok {
		return s.tenant, s.key, true
	}
	if l, ok := idem.LeaseFromContext(ctx); ok {
		id := l.ID()
		return id.Tenant, id.Key, true
	}
	return "", "", false
}

// WithStep returns a context that names the step of the handler an outbound
// request belongs to, such as "charge" or "send-receipt". Each downstream
// call of one logical request needs its own step name; a step repeated in a
// loop needs the index in its name ("refund/0", "refund/1").
func WithStep(ctx context.Context, step string) context.Context {
	return context.WithValue(ctx, stepKey{}, step)
}

// stepKeyVersion separates this derivation from any other use of SHA-256
// over similar bytes, and lets a later derivation change without colliding.
const stepKeyVersion = "idemclient step key v1"

// StepKey returns the idempotency key sent downstream for step of the
// inbound request (tenant, key): 43 characters of unpadded base64url, the
// SHA-256 of the three strings, each prefixed with its length. The length
// prefixes make the encoding injective, so ("a", "bc", s) and ("ab", "c", s)
// differ; only a SHA-256 collision could map two triples to one key.
//
// The key is a hash, not a secret: whoever knows the triple can compute it.
// That is harmless because only this service holds the credentials under
// which the provider scopes the key.
func StepKey(tenant, key, step string) string {
	b := make([]byte, 0, len(stepKeyVersion)+len(tenant)+len(key)+len(step)+4*binary.MaxVarintLen64)
	for _, s := range []string{stepKeyVersion, tenant, key, step} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Propagator is an http.RoundTripper for the outbound calls of a handler
// running under idem. It adds an Idempotency-Key derived by StepKey from the
// scope and step in the request's context to:
//
//   - every POST and PATCH request, which then must carry both a scope and a
//     step: without them RoundTrip fails with ErrNoScope or ErrNoStep
//     instead of sending the request without a key;
//   - a request of any other method whose context names a step.
//
// A key the caller set on the request is never replaced. Other requests pass
// through unchanged. Retrying gives a request under a scope the same key,
// so the two may be composed in either order. The zero value is ready to
// use.
//
// A request it gives a derived key, sent from a handler behind idemhttp
// or idemgrpc, is a step of that handler: once one may have reached its
// server, the handler's status policy no longer releases its key (a 403
// or 429 may be the answer of a second downstream after the first
// charged), it turns the key UNKNOWN; SetDisposition still releases it.
// A request that provably never left does not count (Sent is false for
// its error), which Base tells only when it is a Transport: with any
// other, every failed request counts as sent.
type Propagator struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (p *Propagator) RoundTrip(req *http.Request) (*http.Response, error) {
	base := p.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if keyOf(req.Header) != "" {
		return base.RoundTrip(req)
	}
	key, err := derivedKey(req)
	if err != nil {
		return nil, refuse(req, err)
	}
	if key == "" {
		return base.RoundTrip(req)
	}
	// A RoundTripper must not modify the caller's request.
	out := req.Clone(req.Context())
	out.Header.Set(HeaderKey, key)
	return sendStep(base, out)
}

// sendStep sends req, which carries a key derived from its scope, through
// base, and marks on the protected handler whose context req's is that a
// downstream step may have reached its server, unless Sent says it
// provably never left: the status policy of idemhttp and idemgrpc then no
// longer releases the handler's key (the status may be the downstream's,
// passed on after the step had its effect).
func sendStep(base http.RoundTripper, req *http.Request) (*http.Response, error) {
	o := handlerctx.BeginStep(req.Context())
	resp, err := base.RoundTrip(req)
	if err != nil && !Sent(err) {
		o.NotSent()
	}
	return resp, err
}

// derivedKey returns the key Propagator gives req, which carries none, or
// "" for a request it passes through unchanged. Retrying calls it too, so
// that the two send the same key in either order.
func derivedKey(req *http.Request) (string, error) {
	ctx := req.Context()
	if _, hasStep := ctx.Value(stepKey{}).(string); !hasStep && !needsKey(req.Method) {
		return "", nil
	}
	return DerivedKey(ctx)
}

// refuse closes the body of a request that is not sent for want of a
// derived key, and returns err naming the request.
func refuse(req *http.Request, err error) error {
	closeBody(req)
	return fmt.Errorf("%w: %s %s", err, req.Method, req.URL.Redacted())
}

// DerivedKey returns the key of a downstream call made under ctx:
// StepKey of its scope (ScopeFrom) and its step (WithStep), or ErrNoScope
// or ErrNoStep when ctx lacks one, or the scope's invalid tenant or key.
// Propagator and Retrying give it to HTTP requests, idemgrpc's client
// interceptor to calls; a client of another protocol calls it.
func DerivedKey(ctx context.Context) (string, error) {
	tenant, key, ok := ScopeFrom(ctx)
	if !ok {
		return "", ErrNoScope
	}
	if err := idem.ValidateTenant(tenant); err != nil {
		return "", err
	}
	if err := idem.ValidateKey(key); err != nil {
		return "", err
	}
	step, _ := ctx.Value(stepKey{}).(string)
	if step == "" {
		return "", ErrNoStep
	}
	return StepKey(tenant, key, step), nil
}

// keyOf returns the Idempotency-Key h carries, under any case of the
// name: a header map built by hand or copied from HTTP/2 or gRPC metadata
// holds it under "idempotency-key", which Header.Get does not look up,
// and Transport sends it so. Adding a key of our own next to it would
// send two keys, and a server that reads another one than the caller's
// would run the request again under a key the caller never learns.
func keyOf(h http.Header) string {
	if v := h.Get(HeaderKey); v != "" {
		return v
	}
	for name, vs := range h {
		if len(vs) > 0 && vs[0] != "" && strings.EqualFold(name, HeaderKey) {
			return vs[0]
		}
	}
	return ""
}

// needsKey reports whether method is one the IETF draft gives a key by
// default: the non-idempotent POST and PATCH.
func needsKey(method string) bool {
	return method == http.MethodPost || method == http.MethodPatch
}

// closeBody closes the request body, as a RoundTripper must even when it
// fails before sending.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// Replayed reports whether resp is marked as replayed from an earlier
// execution (Idempotent-Replayed: true), that is, whether the side effect
// was already done by a previous attempt with the same key.
func Replayed(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	return strings.EqualFold(strings.TrimSpace(resp.Header.Get(HeaderReplayed)), "true")
}
