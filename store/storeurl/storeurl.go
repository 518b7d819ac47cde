package storeurl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
)

// ErrBadURL is wrapped by every error about a URL that Open cannot use:
// an unknown scheme, or a Redis or PostgreSQL URL that does not parse.
var ErrBadURL = errors.New("storeurl: bad store URL")

// Options configures Open. A nil *Options means defaults.
type Options struct {
	// Logger receives the warnings of the PostgreSQL and layered stores
	// (a failed reaper pass, a failed Redis call). Nil means
	// slog.Default().
	Logger *slog.Logger
	// MemoryLimit is the memory store's bound in bytes
	// (memstore.Options.MaxBytes): when its live records fill it, new
	// keys fail with store.ErrStoreFull. Zero means memstore's default,
	// 256 MiB. Setting it for another store is an error.
	MemoryLimit int64
	// MemoryTenantShare is the fraction of MemoryLimit that one tenant's
	// records may take (memstore.Options.TenantShare). Zero means
	// memstore's default, a quarter. Setting it for another store is an
	// error.
	MemoryTenantShare float64
	// Coalesce turns on a Redis store's coalesced scripts
	// (redisstore.Options.Coalesce) when its URL says neither coalesce=on
	// nor coalesce=off. The layered store's Redis part takes no
	// coalescing, with or without it.
	Coalesce bool
	// Schema is the PostgreSQL schema that holds the store's tables
	// (pgstore.Options.Schema), of a PostgreSQL or layered store. Empty
	// means pgstore.DefaultSchema. Setting it for another store is an
	// error.
	Schema string
	// NoMigrate makes Open check that the PostgreSQL schema has every
	// migration (pgstore.Pending) instead of applying them, so that a role
	// without the CREATE privilege can open the store: a schema that
	// lacks one is an error wrapping ErrNotMigrated. The other stores have
	// nothing to migrate.
	NoMigrate bool
}

// ErrNotMigrated is wrapped by Open's error when Options.NoMigrate is set
// and the PostgreSQL schema lacks migrations: apply them (pgstore.Migrate,
// `idem migrate`) first.
var ErrNotMigrated = errors.New("storeurl: the PostgreSQL schema is not current")

// Check returns the error Open would return for uri and opts before it
// connects anywhere: a URL that does not parse (wrapping ErrBadURL), or
// an option that does not apply to its store. It connects to nothing.
func Check(uri string, opts *Options) error {
	var o Options
	if opts != nil {
		o = *opts
	}
	if uri == "" {
		return fmt.Errorf("%w: empty; want %s", ErrBadURL, forms)
	}
	if (o.MemoryLimit != 0 || o.MemoryTenantShare != 0) && uri != "memory" {
		return fmt.Errorf("storeurl: Options.MemoryLimit and MemoryTenantShare bound the memory store only, not %s", scheme(uri))
	}
	redisURI, pgURI, layered := splitLayered(uri)
	if o.Schema != "" && !layered && !isPostgresURI(uri) {
		return fmt.Errorf("storeurl: a schema (Options.Schema, idem's --schema) is a PostgreSQL one; %s has none", storeName(uri))
	}
	if o.Schema != "" {
		if err := pgstore.CheckSchema(o.Schema); err != nil {
			return err
		}
	}
	var err error
	switch {
	case layered:
		if err = redisstore.CheckURL(redisURI); err == nil {
			_, err = pgxpool.ParseConfig(pgURI)
		}
	case uri == "memory":
	case isRedisURI(uri):
		err = redisstore.CheckURL(uri)
	case isPostgresURI(uri):
		_, err = pgxpool.ParseConfig(uri)
	default:
		return fmt.Errorf("%w: unknown scheme %s; want %s", ErrBadURL, scheme(uri), forms)
	}
	if err != nil && !errors.Is(err, ErrBadURL) {
		err = fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	return err
}

// splitLayered splits a layered URL into its Redis and PostgreSQL parts. A
// Redis password that holds "+postgres" is written with %2B.
func splitLayered(uri string) (redisURI, pgURI string, ok bool) {
	redisURI, pgRest, ok := strings.Cut(uri, "+postgres")
	if !ok || !isRedisURI(redisURI) {
		return "", "", false
	}
	return redisURI, "postgres" + pgRest, true
}

// Open opens the store that uri names (the forms are listed in the
// package documentation) and returns it with the function that releases
// its connections.
func Open(ctx context.Context, uri string, opts *Options) (store.Store, func() error, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := Check(uri, &o); err != nil {
		return nil, nil, err
	}
	if redisURI, pgURI, ok := splitLayered(uri); ok {
		return openLayered(ctx, redisURI, pgURI, &o)
	}
	switch {
	case uri == "memory":
		s, err := memstore.New(&memstore.Options{MaxBytes: o.MemoryLimit, TenantShare: o.MemoryTenantShare})
		if err != nil {
			return nil, nil, err
		}
		return s, func() error { return nil }, nil
	case isRedisURI(uri):
		if o.Coalesce {
			uri = coalesceUnlessSaid(uri)
		}
		s, closeStore, err := redisstore.OpenURL(uri, nil)
		if errors.Is(err, redisstore.ErrBadURL) {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadURL, err)
		}
		if err != nil {
			return nil, nil, err
		}
		return s, closeStore, nil
	case isPostgresURI(uri):
		s, closeStore, err := openPostgres(ctx, uri, &o)
		if err != nil {
			return nil, nil, err
		}
		return s, closeStore, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown scheme %s; want %s", ErrBadURL, scheme(uri), forms)
}

// coalesceUnlessSaid adds coalesce=on to a Redis uri whose query does not
// name coalesce (Options.Coalesce). A query that does not parse is left to
// redisstore.OpenURL, which says what is wrong with it.
func coalesceUnlessSaid(uri string) string {
	base, query, _ := strings.Cut(uri, "?")
	if q, err := url.ParseQuery(query); err != nil || q.Has("coalesce") {
		return uri
	}
	if query == "" {
		return base + "?coalesce=on"
	}
	return uri + "&coalesce=on"
}

// forms names the forms of the package documentation, for an error.
const forms = "memory, redis://, rediss://, unix://, redis-sentinel://, redis-cluster:// " +
	"(and their rediss- variants), postgres:// or REDIS_URL+postgres://"

// isRedisURI reports whether uri names Redis: every form of
// redisstore.ParseURL (redis, rediss, unix, and their -sentinel and
// -cluster variants).
func isRedisURI(uri string) bool {
	scheme, _, ok := strings.Cut(uri, "://")
	return ok && (strings.HasPrefix(scheme, "redis") || scheme == "unix")
}

// storeName names uri's store for an error: memory, or its scheme.
func storeName(uri string) string {
	if uri == "memory" {
		return "the memory store"
	}
	return "a " + scheme(uri) + " store"
}

func isPostgresURI(uri string) bool {
	return strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://")
}

// scheme returns the scheme of uri for an error message, never the rest,
// which may hold a password.
func scheme(uri string) string {
	if s, _, ok := strings.Cut(uri, "://"); ok {
		return s + "://"
	}
	return "(no scheme)"
}
