// Package memstore is the embedded, in-process store.Store: the default of
// the idem gateway and the store for tests and single-instance services.
//
// Its state is lost when the process ends, and it is shared by nothing but
// the engines of one process. Use store/redisstore or store/pgstore to share
// keys between instances.
//
// A PROCESSING record (its lease running or ended) and an UNKNOWN record
// are never forgotten by time: their work may have run, so they stay until
// settled (Complete, Release by the owner, Resolve, Delete), and report a
// TTL of 0 once UNKNOWN. UNKNOWN and PROCESSING records are indexed by
// tenant and key, so ListUnknown reads them (and lists a lease that ended,
// abandoned, from its end) and no COMPLETED record.
//
// Memory is bounded by Options.MaxBytes. The store never drops a record
// before its life ends (an unsettled one's never does): a dropped record
// would let its retry run again. Expired results go first; when the live
// records fill the bound,
// Acquire of a new key fails with store.ErrStoreFull (fail closed) while
// replays and Get keep answering. A key already admitted always completes,
// past the bound if need be (see Store.Complete).
//
// One tenant's records may take a share of the bound, a quarter by default
// (Options.TenantShare): a tenant at its share gets store.ErrStoreFull for
// its new keys while the other tenants keep acquiring, so one tenant
// cannot fill the store for all. A process with a single tenant sets the
// share to 1.
package memstore
