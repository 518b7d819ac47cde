// Package idem runs side effects exactly once per Idempotency-Key: payment,
// billing and provisioning APIs, message consumers and jobs that must not
// run twice.
//
// # The state engine
//
// A key is in one of three states (see docs/state-machine.md):
//
//   - PROCESSING: one attempt holds a lease on it, identified by a random
//     owner token and a fencing token that strictly increases with every
//     acquisition of the key;
//   - COMPLETED: the result is stored and replayed to every retry;
//   - absent: never seen, released after a retryable failure, or expired.
//
// Every transition is one atomic, ownership-checked step in the Store:
// Complete, Extend and Release change a record only if it is still
// PROCESSING under the caller's owner AND fence. A worker that stalled past
// its lease gets ErrLeaseLost and changes nothing.
//
// # Use
//
// Engine.Begin starts an attempt and answers with exactly one Outcome:
// Acquired (with a Lease), Replayed (with the stored Result), InFlight (with
// the time until the other attempt's lease ends) or Mismatch (the key was
// used for a different request). A held lease renews itself while the work
// runs, and Lease.Context is cancelled when it can no longer be held, so
// work can stop before its side effects. Engine.Do wraps all of it for
// non-HTTP work.
//
// # Stores
//
// store/memstore is the embedded default; store/redisstore runs every
// transition as one Lua script. store/storetest is the conformance suite
// that every Store passes.
package idem
