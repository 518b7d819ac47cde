// Package idem runs side effects exactly once per Idempotency-Key: payment,
// billing and provisioning APIs, message consumers and jobs that must not
// run twice.
//
// Exactly once here means: never run again what may already have run. A
// key is released for a retry only when the work provably did not take
// effect; an unknown outcome is not a failure.
//
// # The state engine
//
// A key is in one of four states (see docs/state-machine.md):
//
//   - PROCESSING: one attempt holds a lease on it, identified by a random
//     owner token and a fencing token that strictly increases with every
//     acquisition of the key;
//   - COMPLETED: the result is stored and replayed to every retry;
//   - UNKNOWN: the work may have had its effect and no result is recorded
//     (the work said so, or its owner's lease ended mid-work); a retry
//     never runs it, it waits for a reconciliation or an operator;
//   - absent: never seen, released after a failure that did not take
//     effect, or expired.
//
// Every transition is one atomic, ownership-checked step in the Store:
// Complete, Extend, Release and MarkUnknown change a record only if it is
// still the caller's, under its owner AND fence. A worker that stalled past
// its lease while another took the key gets ErrLeaseLost and changes
// nothing.
//
// # Running work once
//
// Engine.Do wraps everything for work that is not an HTTP handler (a job,
// a message consumer): it runs the function once per key, under the key's
// Lease (which the function is given, and which its context carries and
// ends with), stores its output, and hands the stored output to every
// later call with the key. Retryable, and the table in Do's
// documentation, say what to do about each of its errors.
// A function whose error is wrapped with NotRun (it stopped before its
// side effect) has its key released, so a later call runs it again. Any
// other error turns its key UNKNOWN, and so does a panic: a failure proves
// nothing about the effect unless the work says so (a 5xx, a reset, a
// timeout may all come after it). The reason kept with an UNKNOWN key is
// the application's (OutcomeUnknown's) or a fixed phrase, never an
// error's text: it is shown to every caller that retries the key.
//
// Engine.Begin is the step-by-step form. It answers with exactly one
// Decision: Acquired (with a Lease), Replayed (with the stored Result),
// InFlight (with the time until the other attempt's lease ends), Mismatch
// (the key was used for a different request) or Unknown (an earlier
// attempt may have had its effect; the work must not run). The holder of a
// Lease defers Lease.Close (a panic or a path that records nothing turns
// the key UNKNOWN, never frees it), does the work and then calls
// Lease.Complete with the result, or Lease.Release when the work did not
// take effect; neither ends with its context. While the work runs,
// the lease renews itself; Lease.Context is cancelled when the lease can
// no longer be held, and Lease.Check answers synchronously whether it is
// still held: call it just before the side effect. Pass Lease.Fence with
// the work's own writes (store/pgstore's guardrail, or a provider's
// idempotency key), so that they can refuse an owner whose lease was
// taken over.
//
// The HTTP middleware in package idemhttp runs Begin, Complete and Release
// around a handler.
//
// # Outcomes that are unknown
//
// Options.Takeover decides what a retry does with a key whose owner's
// lease ended mid-work: turn it UNKNOWN (the default) or run it again
// knowingly (Lease.PreviousFence names the previous fence, for the downstream to
// check). Options.Reconcile is asked, once per key at a time across every
// process, what became of an UNKNOWN key: completed (with the result to
// replay), not executed (the retry runs it) or still unknown. A retry asks
// it; Engine.ReconcileAll sweeps the keys no retry comes back for,
// within a rate and a concurrency bound and backing off the keys whose
// lookup keeps failing (Options.ReconcileRate, ReconcileConcurrency,
// ReconcileBackoff); Engine.Resolve is an operator's answer, and
// Engine.ListUnknown lists what is waiting for one. Engine.Delete
// invalidates a COMPLETED key only; ForceDelete any.
//
// The package's Example (example_test.go) is a payment handler on Begin,
// every decision and what the lease's holder does about its side effect;
// ExampleEngine_Do, ExampleEngine_Begin, ExampleRetryable and
// ExampleObserver (example_*_test.go; shown beside them by pkg.go.dev and
// `go doc -http`) run the rest on the memory store.
//
// # When the store fails
//
// Every store call has a deadline, Options.StoreTimeout (2s by default): a
// Begin whose store does not answer by then fails with ErrStore and the
// work does not run. A Complete, MarkUnknown or Release that the store has
// not taken by then is held in memory and retried in the background for
// the rest of the lease (Options.MaxHeld), and a retry that reaches this
// engine is answered from it; Engine.Shutdown stores what is held before
// the process exits.
//
// # Observing
//
// Options.Observer is told about every store call the engine makes and
// every renewed, lost or expired lease, for metrics and traces; the idem
// gateway's store metrics and spans come from one. A HoldObserver is also
// told of every held finalization.
//
// # Stores, and package store
//
// A Store keeps the records: New takes one (memstore.New(), a
// redisstore or a pgstore), and an application never imports package
// store. Package store is the driver package, as database/sql/driver is
// database/sql's: it holds the contract between the engine and its
// backends (the Store interface, the parameters of its calls, the owner
// and fence references) for a store writer. The values an application
// reads (ID, Result, Record and its State, ListParams, ListPage) are
// package store's types under this package's names (idem.Result is
// store.Result), so both sides hand one another the same values. No store
// imports this package.
// store/memstore is the embedded default, for one
// process; store/redisstore runs every transition as one Lua script on
// Redis (single node, Sentinel or Cluster); store/pgstore keeps records in
// PostgreSQL, which does not lose a committed write, and adds the
// guardrail for the application's own transaction; store/layered puts a
// Redis mirror in front of PostgreSQL. store/storetest is the conformance
// suite that every Store passes, and store/recordcodec holds what a new
// store needs beyond package store.
package idem
