package storeurl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/internal/urlquery"
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
	// Rueidis makes a Redis store's client rueidis (client=rueidis) when
	// its URL names no client=: a URL that then gives one of go-redis's
	// pool options is refused, naming client=go-redis. rueidis dials at
	// Open. The layered store's Redis part stays on go-redis, with or
	// without it.
	Rueidis bool
	// NoMigrate makes Open check that the PostgreSQL schema (the URL's
	// ?schema=) has every migration (pgstore.Pending) instead of applying
	// them, so that a role without the CREATE privilege can open the
	// store: a schema that lacks one is an error wrapping ErrNotMigrated.
	// The other stores have nothing to migrate: it is refused for them,
	// not ignored. It is an option, not a
	// URL parameter: it says what this process may do to the database,
	// not where the keys live, and the URL that a migration step (Migrate,
	// idem migrate) and the processes that then use the store share must
	// name the same store.
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
	t, err := parse(uri, &o)
	if err != nil {
		return err
	}
	if t.postgres != "" {
		_, err = pgxpool.ParseConfig(t.postgres)
	}
	switch {
	case err != nil || t.redis == "":
	case t.postgres == "": // Redis alone
		err = redact.AsWritten(redisstore.CheckURL(t.redis), t.redisWritten)
	default: // the layered store's Redis part, which takes go-redis's options only
		var c interface{ Close() error }
		if c, err = redisstore.ParseURL(t.redis); err == nil {
			c.Close() // it connects lazily: nothing was dialled
		}
		err = redact.AsWritten(err, t.redisWritten)
	}
	if err != nil && !errors.Is(err, ErrBadURL) {
		err = fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	return err
}

// target is what a URL names, with Open's own parameters taken out of
// the parts that the drivers read: the memory store, a Redis URL, a
// PostgreSQL URL, or both (layered).
type target struct {
	memory          bool
	redis, postgres string
	redisWritten    string // the Redis part as written, which a refusal quotes (redact.AsWritten)
	prefix          string // ?prefix= of the Redis part
	schema          string // ?schema= of the PostgreSQL part
}

// parse splits uri into its target: the one reading of a URL, for Check,
// Open and Migrate alike.
func parse(uri string, o *Options) (target, error) {
	var t target
	if uri == "" {
		return t, fmt.Errorf("%w: empty; want %s", ErrBadURL, forms)
	}
	if (o.MemoryLimit != 0 || o.MemoryTenantShare != 0) && uri != "memory" {
		return t, fmt.Errorf("storeurl: Options.MemoryLimit and MemoryTenantShare bound the memory store only, not %s", scheme(uri))
	}
	// A Redis password that holds "+postgres" is written with %2B.
	if redisURI, pgRest, ok := strings.Cut(uri, "+postgres"); ok && isRedisURI(redisURI) {
		t.redis, t.postgres = redisURI, "postgres"+pgRest
	} else {
		switch {
		case uri == "memory":
			t.memory = true
		case isRedisURI(uri):
			t.redis = uri
		case isPostgresURI(uri):
			t.postgres = uri
		default:
			return t, fmt.Errorf("%w: unknown scheme %s; want %s", ErrBadURL, scheme(uri), forms)
		}
	}
	if o.NoMigrate && t.postgres == "" {
		return t, fmt.Errorf("storeurl: Options.NoMigrate applies to a PostgreSQL store only (postgres://, or Redis in front of one), which has tables to migrate; not %s", storeName(uri))
	}
	if t.memory {
		return t, nil
	}
	var err error
	if t.redis != "" {
		t.redisWritten = t.redis
		if t.redis, t.prefix, err = takeParam(t.redis, "prefix"); err != nil {
			return t, err
		}
		if _, err := redisrecord.Prefix(t.prefix, ""); err != nil {
			return t, fmt.Errorf("%w: %w", ErrBadURL, err)
		}
		if t.postgres == "" && (o.Coalesce || o.Rueidis) {
			// The URL as written is checked before the defaults go into
			// its query, so that an error quotes what its user wrote.
			if err := redisstore.CheckURL(t.redis); err != nil {
				return t, fmt.Errorf("%w: %w", ErrBadURL, redact.AsWritten(err, t.redisWritten))
			}
			if o.Coalesce {
				t.redis = addUnlessSaid(t.redis, "coalesce", "on")
			}
			if o.Rueidis {
				t.redis = addUnlessSaid(t.redis, "client", "rueidis")
			}
		}
	}
	if t.postgres != "" {
		if t.postgres, t.schema, err = takeParam(t.postgres, "schema"); err != nil {
			return t, err
		}
		if err := pgstore.CheckSchema(cmp.Or(t.schema, pgstore.DefaultSchema)); err != nil {
			return t, fmt.Errorf("%w: %w", ErrBadURL, err)
		}
	}
	return t, nil
}

// Store is a store that Open opened, with what it opened for it: Close
// releases its connections (and stops a PostgreSQL store's reaper).
type Store interface {
	store.Store
	Close() error
}

// Open opens the store that uri names (the forms are listed in the
// package documentation). Close it when done: it releases the
// connections Open made.
func Open(ctx context.Context, uri string, opts *Options) (Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t, err := parse(uri, &o)
	if err != nil {
		return nil, err
	}
	if t.redis != "" && t.postgres != "" {
		return openLayered(ctx, t, &o)
	}
	switch {
	case t.memory:
		s, err := memstore.New(&memstore.Options{MaxBytes: o.MemoryLimit, TenantShare: o.MemoryTenantShare})
		if err != nil {
			return nil, err
		}
		return s, nil
	case t.postgres != "":
		return openPostgres(ctx, t, &o)
	}
	s, err := redisstore.OpenURL(t.redis, &redisstore.Options{Prefix: t.prefix})
	err = redact.AsWritten(err, t.redisWritten)
	if errors.Is(err, redisstore.ErrBadURL) {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// takeParam takes the query parameter name out of uri: Open's own
// parameters (a PostgreSQL schema, a Redis key prefix) mean nothing to the
// drivers, which would refuse them or send them to the server. It is
// an error to give one twice or empty.
func takeParam(uri, name string) (rest, value string, err error) {
	base, query, ok := strings.Cut(uri, "?")
	if !ok || !strings.Contains(query, name) {
		return uri, "", nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s query: %v", ErrBadURL, scheme(uri), err)
	}
	vs, ok := q[name]
	switch {
	case !ok:
		return uri, "", nil
	case len(vs) != 1 || vs[0] == "":
		return "", "", fmt.Errorf("%w: %s: give %s=... once, not empty", ErrBadURL, scheme(uri), name)
	}
	if rest := urlquery.Without(query, name); rest != "" {
		return base + "?" + rest, vs[0], nil
	}
	return base, vs[0], nil
}

// owned is a store with the connections Open made for it, which its
// Close closes after it.
type owned struct {
	store.Store
	close func() error
}

func (o owned) Close() error { return o.close() }

// addUnlessSaid adds name=value to a Redis uri whose query does not name
// name (Options.Coalesce, Options.Rueidis). redisstore.CheckURL has
// refused a query that does not parse.
func addUnlessSaid(uri, name, value string) string {
	base, query, _ := strings.Cut(uri, "?")
	if q, _ := url.ParseQuery(query); q.Has(name) {
		return uri
	}
	if query == "" {
		return base + "?" + name + "=" + value
	}
	return uri + "&" + name + "=" + value
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
