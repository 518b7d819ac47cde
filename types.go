package idem

import "github.com/idemkit/idem/store"

// The values an application reads, under the names it reads them by. Each is
// the type of package store itself (idem.Result is store.Result, not a copy of
// it), so that an application never imports package store, and a store hands
// the engine the very values the application gets back.
type (
	// Store keeps the records: memstore, redisstore, pgstore or layered
	// make one. An application names it only to pass one around (a
	// function that opens the store its configuration says); its methods
	// are for the engine, and documented for store writers in package
	// store.
	Store = store.Store
	// ID names one idempotency key within one tenant (Tenant, Key).
	ID = store.ID
	// Result is what a finished attempt produced (Status, Header, Body),
	// stored byte-exact and replayed to every later attempt with the key.
	// Work run by Do uses Body only.
	Result = store.Result
	// Record is the stored view of one key: its State, the attempt that
	// made it so (Owner, Fence), when (AcquiredAt, CompletedAt), why it is
	// UNKNOWN (Reason), its Label, and, COMPLETED only, its Result, which
	// is read-only (copy it to change it). Get and ListUnknown return it,
	// Options.Reconcile is given it, and OutcomeUnknownError carries it.
	Record = store.Record
	// State is the state of one key: StateProcessing, StateCompleted,
	// StateUnknown or StateExpired (a Record's State).
	State = store.State
	// ListParams asks ListUnknown for a page of UNKNOWN keys, of one Tenant
	// or of all (AllTenants), after the previous page's Next, at most Limit
	// of them.
	ListParams = store.ListParams
	// ListPage is one page of UNKNOWN keys (Records), in a stable order; its
	// Next, empty on the last page, is the next call's ListParams.After.
	ListPage = store.ListPage
)

// The states of a key that a Record can be in; see docs/state-machine.md.
const (
	// StateProcessing: one attempt holds a lease on the key and is doing
	// the work.
	StateProcessing = store.StateProcessing
	// StateCompleted: the work finished; its Result is replayed to every
	// retry.
	StateCompleted = store.StateCompleted
	// StateUnknown: the work may have had its effect and no result is
	// recorded; no retry runs it again until Options.Reconcile or
	// Engine.Resolve says what happened.
	StateUnknown = store.StateUnknown
	// StateExpired: a tombstone: the key completed and its result's
	// retention ended within its key retention (Options.KeyRetention).
	StateExpired = store.StateExpired
)
