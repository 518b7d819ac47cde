// Package memstore is the embedded, in-process store.Store: the default of
// the idem gateway and the store for tests and single-instance services.
//
// Its state is lost when the process ends, and it is shared by nothing but
// the engines of one process. Use store/redisstore or store/pgstore to share
// keys between instances.
//
// A PROCESSING record outlives its lease by the retention, and an UNKNOWN
// record lives for its retention (by the key retention instead, when that
// is longer): a lease that ended is not free room, since its work may have
// run. UNKNOWN and PROCESSING records are indexed by tenant and key, so
// ListUnknown reads them (and lists a lease that ended, abandoned, from
// its end) and no COMPLETED record.
//
// Memory is bounded by Options.MaxBytes. The store never drops a record
// before its life (lease and retention) ends: a dropped result would let
// its retry run again. Expired records go first; when the live ones fill the bound,
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
