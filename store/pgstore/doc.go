// Package pgstore is an store.Store on PostgreSQL, and the guardrail that
// makes the application's own transaction the last line of defence against
// a second execution.
//
// # Records
//
// One row per key in SCHEMA.records, keyed by (tenant_id, idempotency_key).
// Every transition is one SQL statement that checks the state, the owner
// and the fence of the lease in its WHERE clause. Lease deadlines and
// retention ends are computed from the database's clock_timestamp(), never
// from the application's clock; a row past its end is absent to every
// query, and the store's reaper deletes it later. The reaper has its own
// column, reap_at, so that no index covers a column that Complete or
// Extend changes but records_leases, the PROCESSING rows by the end of
// their lease, through which ListUnknown finds a lease that ended with
// nobody to finish it (migrations/007_leases.sql).
//
// # Reaper
//
// New starts a goroutine that deletes the rows whose life ended, every
// minute (Options.ReapInterval), in statements of at most 1,000 rows, each
// its own short transaction that skips the rows others hold (FOR UPDATE
// SKIP LOCKED), until a statement finds fewer due rows: it never holds a
// long lock, and several processes on one schema share the work. Close
// stops it; the pool stays the caller's to close. A negative ReapInterval
// turns it off, for a process that calls Store.Reap itself, or that uses
// only the guardrail (no records to reap).
//
// # Fences
//
// Fencing tokens come from a PostgreSQL sequence, taken in the statement
// that grants the lease. A sequence never hands out a value twice, after a
// rollback, a crash or a restart, so the fence strictly increases for every
// key, including after release, delete and expiry, and whatever happens to
// a Redis in front of it (store/layered). PostgreSQL does not lose a
// committed write, which Redis's asynchronous replication can.
//
// The sequence is kept at or above the database's clock in microseconds,
// as the memory and Redis stores floor their fences: a fence is at least
// its acquisition time in microseconds and at most about a second above
// it.
// Fences of every store are thus comparable, and a team that moves from
// Redis to PostgreSQL keeps getting fences above the ones its fenced rows
// hold. The sequence only goes up: after the clock steps back, fences keep
// counting from the highest. Moving the sequence up, at most once a second,
// waits for the acquisitions in flight to commit: do not hold locks on the
// store's rows in a transaction of your own. See
// migrations/005_fence_clock.sql and docs/store-failures.md ("Fences across
// stores").
//
// # Guardrail
//
// Store.Guard runs the work in a transaction of its own under the
// reservation of the lease's key: reserve, run, settle, commit, or roll
// back on error, as pgx.BeginFunc runs a function in a transaction; a key
// another transaction settled gives that outcome back without running
// the work. It is built of the steps an application may also call itself:
// Store.Reserve inserts a reservation row in the caller's transaction
// before the provider is called; a second reservation of the key fails
// with ErrDuplicate. Store.Settle records the outcome with a fence check,
// and FencedExec applies the same check to the application's own tables.
// See the package examples for the whole flow.
//
// Guard's errors before its work ran are not marked idem.NotRun: the
// idem work around Guard may have had effects before it, and Do must
// then keep the key. A Do work whose only effect is Guard's work marks
// them itself, when Guard never entered that work (Store.Guard shows
// the lines).
//
// # Schema
//
// Migrate applies the migrations embedded from migrations/*.sql; New does
// not run them.
package pgstore
