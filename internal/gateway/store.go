package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

// ErrStoreURI is wrapped by every error about a --store value.
var ErrStoreURI = errors.New("gateway: bad store URI")

// StoreURIHelp lists the accepted --store forms.
const StoreURIHelp = `memory (the embedded default), redis://[user:pass@]host:port/db, rediss://..., ` +
	`redis-sentinel://[user:pass@]host:port,host:port/master[/db], redis-cluster://host:port,host:port, unix:// ` +
	`(a Redis form takes ?near_cache=on to serve replays from process memory, ` +
	`and ?coalesce=off to send each script alone instead of the default: the scripts that come while two are in flight go out as one batch), ` +
	`postgres://user@host:port/db, or layered: REDIS_URI+postgres://...`

// StoreOptions configures OpenStore. A nil *StoreOptions means defaults.
type StoreOptions struct {
	// Logger receives the PostgreSQL reaper's warnings. Nil means
	// slog.Default().
	Logger *slog.Logger
	// MemoryLimit is the memory store's bound (memstore.Options.MaxBytes):
	// when its live records fill it, new keys get 503 store_full. Zero
	// means memstore's default, 256 MiB. Setting it for another store is
	// an error.
	MemoryLimit int64
	// MemoryTenantShare is the fraction of MemoryLimit one tenant's
	// records may take (memstore.Options.TenantShare): past it, that
	// tenant's new keys get 503 store_full and the others' do not. Zero
	// means memstore's default, a quarter. Setting it for another store is
	// an error.
	MemoryTenantShare float64
}

// OpenStore opens the store a --store URI names. The returned close
// function releases its connections.
func OpenStore(ctx context.Context, uri string, opts *StoreOptions) (store.Store, func() error, error) {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	memory := uri == "" || uri == "memory"
	if (o.MemoryLimit != 0 || o.MemoryTenantShare != 0) && !memory {
		return nil, nil, fmt.Errorf("%w: --memory-limit and --memory-tenant-share bound the memory store only, not %s", ErrStoreURI, scheme(uri))
	}
	if redisURI, pgURI, ok := strings.Cut(uri, "+postgres"); ok && isRedisURI(redisURI) {
		return openLayered(ctx, redisURI, "postgres"+pgURI, log)
	}
	switch {
	case memory:
		s, err := memstore.New(&memstore.Options{MaxBytes: o.MemoryLimit, TenantShare: o.MemoryTenantShare})
		return s, func() error { return nil }, err
	case isRedisURI(uri):
		// ?near_cache=on serves replays from process memory, ?coalesce=on
		// batches the scripts (redisstore.OpenURL).
		s, closeStore, err := redisstore.OpenURL(coalesceByDefault(uri), nil)
		if errors.Is(err, redisstore.ErrBadURL) {
			return nil, nil, fmt.Errorf("%w: %w", ErrStoreURI, err)
		}
		if err != nil {
			return nil, nil, err
		}
		return s, closeStore, nil
	case strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://"):
		s, closeStore, err := openPostgres(ctx, uri, log)
		if err != nil {
			return nil, nil, err
		}
		return s, closeStore, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown scheme %s; want %s", ErrStoreURI, scheme(uri), StoreURIHelp)
}

// coalesceByDefault turns on the Redis store's coalesced scripts unless
// uri says coalesce=off: the gateway measured faster with them at 2 and at
// 32-64 concurrent clients, for first requests and replays alike, and a
// key's semantics are the same (docs/benchmarks.md, "Coalesced scripts").
// The library's default stays off: it is a choice for a process that owns
// its store, as the gateway does.
func coalesceByDefault(uri string) string {
	base, query, _ := strings.Cut(uri, "?")
	if q, err := url.ParseQuery(query); err == nil && q.Has("coalesce") {
		return uri
	}
	if query == "" {
		return base + "?coalesce=on"
	}
	return uri + "&coalesce=on"
}

// isRedisURI reports whether uri names Redis: every form of
// redisstore.ParseURL (redis, rediss, unix, and their -sentinel and
// -cluster variants).
func isRedisURI(uri string) bool {
	scheme, _, ok := strings.Cut(uri, "://")
	return ok && (strings.HasPrefix(scheme, "redis") || scheme == "unix")
}

// scheme returns the scheme of uri for an error message, never the rest,
// which may hold a password.
func scheme(uri string) string {
	if s, _, ok := strings.Cut(uri, "://"); ok {
		return s + "://"
	}
	return "(no scheme)"
}
