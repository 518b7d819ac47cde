// Package lab is the breach lab: it runs the failure vectors of the
// idempotency article against the naive SET NX lock and against idem, with
// real servers and real faults, and checks each run's history.
//
// A run has clients that send requests for a few idempotency keys and retry
// with the same key on 409, 5xx and timeouts; workers (goroutines, each with
// its own store client, or processes of their own that a fault can
// SIGKILL) that serve them with one implementation; a fake payment provider
// that records every call and can be asked for the charge of a key (in
// process, or an HTTP server whose calls can be cut or outlive their
// caller); a ledger in PostgreSQL where the application writes its
// effects; and one fault, injected mid-run. Every request is recorded as
// invoke / ok / fail / info (info: outcome unknown, because the client
// timed out or the worker said so), and the checker counts per run: keys
// executed more than once at the provider, keys with more than one ledger
// row, keys whose acknowledged result was later replayed differently or
// lost, keys idem kept UNKNOWN, keys that no client got an answer for, and
// how often a fence refused a stale owner.
//
// Worker processes run the lab's own executable: a program that runs the
// lab calls MaybeRunWorker first thing.
//
// Main runs the scenarios and prints the table; docs/failure-model.md
// explains every vector and holds a measured table.
package lab
