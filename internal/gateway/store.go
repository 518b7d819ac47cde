package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

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
	`?coalesce=off to send each script alone instead of the default: the scripts that come while two are in flight go out as one batch, ` +
	`and ?client=go-redis for go-redis and its pool options (pool_size=N, read_timeout=D, ...) instead of the default client, rueidis), ` +
	`postgres://user@host:port/db (?schema=NAME: the schema of its tables, default idem; idem migrate takes the same URL), ` +
	`or layered: REDIS_URI+postgres://...; a Redis form takes ?prefix=P for its keys`

// StoreOptions configures OpenStore: --memory-limit (MemoryLimit, past
// which new keys get 503 store_full), --memory-tenant-share, --no-migrate
// (NoMigrate) and the logger. OpenStore sets Coalesce and Rueidis itself.
// A nil *StoreOptions means defaults.
type StoreOptions = storeurl.Options

// OpenStore opens the store a --store URI names (storeurl.Open, with the
// gateway's defaults: an empty URI is the memory store, and a Redis store
// coalesces its scripts unless the URI says coalesce=off: the gateway
// measured faster with them at 2 and at 32-64 concurrent clients, for
// first requests and replays alike, and a key's semantics are the same
// (docs/redis-internals.md, "Coalesced scripts"); the library's default stays
// off, a choice for a process that owns its store, as the gateway does),
// on a rueidis client unless the URI says client=go-redis (the gateway
// measured faster on it at 32 and 128 clients, docs/benchmarks.md; rueidis
// dials at open, where go-redis dials at the first call, and the
// gateway's start retries an open that fails as it retries a store that
// does not answer).
// The returned close function releases its connections. An error of
// CheckStore's comes before any connection.
func OpenStore(ctx context.Context, uri string, opts *StoreOptions) (store.Store, func() error, error) {
	if err := CheckStore(uri, opts); err != nil {
		return nil, nil, err
	}
	o := storeOptions(opts)
	s, err := storeurl.Open(ctx, cmp.Or(uri, "memory"), &o)
	if errors.Is(err, storeurl.ErrBadURL) {
		return nil, nil, fmt.Errorf("%w: %w", ErrStoreURI, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// CheckStore returns the error OpenStore would return for uri and opts
// before it connects anywhere (storeurl.Check): a URI that does not parse
// (wrapping ErrStoreURI), or an option that does not apply to its store.
// It connects to nothing: a configuration checker's answer.
func CheckStore(uri string, opts *StoreOptions) error {
	uri = cmp.Or(uri, "memory")
	o := storeOptions(opts)
	if (o.MemoryLimit != 0 || o.MemoryTenantShare != 0) && uri != "memory" {
		return fmt.Errorf("%w: --memory-limit and --memory-tenant-share bound the memory store only (--store memory)", ErrStoreURI)
	}
	if o.NoMigrate && !hasPostgres(uri) {
		return fmt.Errorf("%w: --no-migrate applies to a PostgreSQL store only (postgres://...), which has tables to migrate; %s has none", ErrStoreURI, storeKind(uri))
	}
	if err := storeurl.Check(uri, &o); err != nil {
		if errors.Is(err, storeurl.ErrBadURL) {
			err = fmt.Errorf("%w: %w", ErrStoreURI, err)
		}
		return err
	}
	return nil
}

// hasPostgres reports whether uri names a PostgreSQL store, alone
// (postgres://, postgresql://) or behind Redis (redis://...+postgres://).
func hasPostgres(uri string) bool {
	return strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://") || strings.Contains(uri, "+postgres")
}

// storeKind names the kind of store uri is, without its address (which
// may hold a password).
func storeKind(uri string) string {
	if uri == "memory" {
		return "the memory store"
	}
	scheme, _, _ := strings.Cut(uri, "://")
	return "a " + scheme + ":// store"
}

// storeOptions are opts with the gateway's defaults.
func storeOptions(opts *StoreOptions) StoreOptions {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	o.Coalesce, o.Rueidis = true, true
	return o
}
