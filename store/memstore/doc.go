// Package memstore is the embedded, in-process idem.Store: the default of
// the idem gateway and the store for tests and single-instance services.
//
// Its state is lost when the process ends, and it is shared by nothing but
// the engines of one process. Use store/redisstore or store/pgstore to share
// keys between instances.
//
// Memory is bounded by Options.MaxBytes. When a new record would go over
// the bound, expired records go first, then COMPLETED records in the order
// their retention ends (soonest first). PROCESSING records are never
// dropped: when only they are left, Acquire fails with idem.ErrStoreFull
// (fail closed), and so does a Complete whose result does not fit.
package memstore
