// Package store is the contract between the idem engine and the backends
// that keep its records: the Store interface, the parameters and results
// of its calls, the Record and its State, and the errors a store returns.
//
// An application does not import it: the values it shares with a store
// (the ID of a key, the Result a lease completes with, the Record that
// Engine.Get, a reconciliation and an *idem.OutcomeUnknownError show) are
// this package's types under package idem's names (idem.Result is
// store.Result). Everything here is for those who write a store, and is
// documented for them.
//
// # Why a package of its own
//
// Package idem is what an application programs against: the Engine, its
// Options, the Key of an attempt, the Lease, the errors of Do. The
// parameters and results of the ten store calls, the lease reference and
// the record's states are what a store writer programs against, and on
// one page they buried the first: go doc sorts names, and five of the first six types a
// newcomer met were store plumbing. River keeps its driver interface and
// every parameter type in riverdriver ("not to be implemented or invoked
// by user code") and the types both sides share in rivertype; this package
// is both, because here the shared types (ID, Result, Record) and the
// driver's are few.
//
// The layout is free of cycles: package store imports only the standard
// library; idem imports store; every backend (store/memstore,
// store/redisstore, store/pgstore, store/layered) imports store and never
// idem, so a backend can be written, built and tested without the engine.
// store/storetest is the conformance suite every Store passes, and
// store/recordcodec the byte encoding of a result's header that the
// stores of this module share. store/storeurl opens any of them from one
// URL, as the gateway's --store does.
//
// The errors here are the very values package idem returns
// (idem.ErrLeaseLost is ErrLeaseLost), so errors.Is finds them through
// either name.
//
// # Writing a store
//
// Implement Store, keeping every transition one atomic step that checks
// the owner and the fence (see Store), and run storetest.Run against a
// real instance of the backend. Keys are validated with ValidateKey and
// ValidateTenant when they are read back from the backend.
package store
