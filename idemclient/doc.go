// Package idemclient is the client half of the Idempotency-Key protocol:
// what a service sends to the APIs it calls.
//
// # Outbound propagation
//
// A handler running under idem that calls a payment provider must give the
// provider a key of its own, or a retried run of the handler charges twice.
// Propagator derives that key from the inbound request's scope (tenant and
// key, put in the context by WithScope) and a step name (WithStep): the same
// triple gives the same key on every retry and on every worker, and two
// different triples never give the same key (see StepKey). Replayed reads
// the provider's Idempotent-Replayed marker back.
//
// # Retrying
//
// Retrying is for callers of idempotent APIs: it gives POST and PATCH a
// random key when the caller set none (under a scope, the key Propagator
// derives), and resends the request with the same key after network
// errors, 409 (the first attempt is still running), 429 and 5xx but 501
// and 505 (a retry does not change them), honouring
// Retry-After, with capped exponential backoff and full jitter. It never
// retries 422 or another 4xx.
//
// # Composition
//
// Propagator and Retrying may be composed in either order: under a scope
// both give a request the key derived from its step, or refuse it with
// ErrNoStep, and neither replaces a key already set:
//
//	rt, err := idemclient.NewRetrying(http.DefaultTransport, nil)
//	client := &http.Client{Transport: &idemclient.Propagator{Base: rt}}
package idemclient

// Header names of the protocol.
const (
	// HeaderKey carries the idempotency key of a request (IETF
	// draft-ietf-httpapi-idempotency-key-header).
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" by a server on a response it replayed
	// from an earlier execution (Stripe's marker).
	HeaderReplayed = "Idempotent-Replayed"
)
