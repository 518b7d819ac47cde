package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/storeurl"
)

// ErrStoreURI is wrapped by every error about a --store value.
var ErrStoreURI = errors.New("gateway: bad store URI")

// StoreURIHelp lists the accepted --store forms (storeurl's, with the
// gateway's defaults).
const StoreURIHelp = `memory (the embedded default), redis://[user:pass@]host:port/db, rediss://..., ` +
	`redis-sentinel://[user:pass@]host:port,host:port/master[/db], redis-cluster://host:port,host:port, unix:// ` +
	`(a Redis form takes ?near_cache=on to serve replays from process memory, ` +
	`and ?coalesce=off to send each script alone instead of the default: the scripts that come while two are in flight go out as one batch), ` +
	`postgres://user@host:port/db, or layered: REDIS_URI+postgres://...`

// StoreOptions configures OpenStore: --memory-limit (MemoryLimit, past
// which new keys get 503 store_full), --memory-tenant-share and the
// logger. OpenStore sets Coalesce itself. A nil *StoreOptions means
// defaults.
type StoreOptions = storeurl.Options

// OpenStore opens the store a --store URI names (storeurl.Open, with the
// gateway's defaults: an empty URI is the memory store, and a Redis store
// coalesces its scripts unless the URI says coalesce=off: the gateway
// measured faster with them at 2 and at 32-64 concurrent clients, for
// first requests and replays alike, and a key's semantics are the same
// (docs/benchmarks.md, "Coalesced scripts"); the library's default stays
// off, a choice for a process that owns its store, as the gateway does).
// The returned close function releases its connections.
func OpenStore(ctx context.Context, uri string, opts *StoreOptions) (store.Store, func() error, error) {
	if uri == "" {
		uri = "memory"
	}
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	if (o.MemoryLimit != 0 || o.MemoryTenantShare != 0) && uri != "memory" {
		return nil, nil, fmt.Errorf("%w: --memory-limit and --memory-tenant-share bound the memory store only (--store memory)", ErrStoreURI)
	}
	o.Coalesce = true
	s, err := storeurl.Open(ctx, uri, &o)
	if errors.Is(err, storeurl.ErrBadURL) {
		return nil, nil, fmt.Errorf("%w: %w", ErrStoreURI, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}
