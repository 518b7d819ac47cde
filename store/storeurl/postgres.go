package storeurl

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store/layered"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
)

// defaultConnectTimeout bounds a new PostgreSQL connection (dial, TLS,
// authentication) when the URL sets no connect_timeout. The pool makes
// connections in the background, past the request that asked for one;
// without a bound, a dial into a cut link waits for the kernel (minutes),
// holding a pool slot after the link is back.
const defaultConnectTimeout = 5 * time.Second

// migrateTimeout bounds the migrations Open applies.
const migrateTimeout = 30 * time.Second

// Migrate applies the migrations of the PostgreSQL store that uri names
// (a postgres:// URL or the PostgreSQL part of a layered one) to the
// schema of its ?schema= (pgstore.DefaultSchema without one): the schema
// that Open of the same URL uses, for a deployment that migrates as a
// separate step and opens the store with Options.NoMigrate. It returns
// that schema and the migrations it lacked before, which are applied
// when it returns nil (by this call, or by another process migrating it
// at the same moment). ctx bounds it.
func Migrate(ctx context.Context, uri string) (schema string, applied []string, err error) {
	t, err := parse(uri, &Options{})
	if err != nil {
		return "", nil, err
	}
	if t.postgres == "" {
		return "", nil, fmt.Errorf("%w: %s has no PostgreSQL to migrate; want a postgres:// URL, or a layered REDIS_URL+postgres:// one", ErrBadURL, storeName(uri))
	}
	pool, err := connect(ctx, t.postgres)
	if err != nil {
		return "", nil, err
	}
	defer pool.Close()
	opts := &pgstore.Options{Schema: t.schema}
	if applied, err = pgstore.Pending(ctx, pool, opts); err == nil {
		err = pgstore.Migrate(ctx, pool, opts)
	}
	if err != nil {
		return "", nil, fmt.Errorf("storeurl: migrating the PostgreSQL store: %w", err)
	}
	return cmp.Or(t.schema, pgstore.DefaultSchema), applied, nil
}

// connect makes the pool of a PostgreSQL URL that parse returned.
func connect(ctx context.Context, uri string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(uri)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	return pool, nil
}

// openPostgres opens the PostgreSQL store of t and applies its migrations
// to t's schema (they are idempotent and serialised by an advisory lock,
// so several processes may start at once), or with o.NoMigrate checks
// that none is missing. The store reaps its expired rows every minute
// (pgstore.DefaultReapInterval); several processes share the work. Its
// Close stops the reaper and closes the pool.
func openPostgres(ctx context.Context, t target, o *Options) (Store, error) {
	pool, err := connect(ctx, t.postgres)
	if err != nil {
		return nil, err
	}
	opts := &pgstore.Options{Schema: t.schema, Logger: o.Logger}
	migrateCtx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if o.NoMigrate {
		pending, err := pgstore.Pending(migrateCtx, pool, opts)
		if err == nil && len(pending) > 0 {
			err = fmt.Errorf("%w: schema %s lacks %d migrations (%s)", ErrNotMigrated, cmp.Or(t.schema, pgstore.DefaultSchema),
				len(pending), strings.Join(pending, ", "))
		}
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("storeurl: checking the PostgreSQL store's schema: %w", err)
		}
	} else if err := pgstore.Migrate(migrateCtx, pool, opts); err != nil {
		pool.Close()
		return nil, fmt.Errorf("storeurl: migrating the PostgreSQL store: %w", err)
	}
	s, err := pgstore.New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return owned{Store: s, close: func() error { s.Close(); pool.Close(); return nil }}, nil
}

// openLayered opens Redis in front of PostgreSQL: the Redis part takes
// ?prefix= (the mirror's key prefix), the PostgreSQL part ?schema=.
func openLayered(ctx context.Context, t target, o *Options) (Store, error) {
	client, err := redisstore.ParseURL(t.redis)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, redact.AsWritten(err, t.redisWritten))
	}
	pg, err := openPostgres(ctx, t, o)
	if err != nil {
		client.Close()
		return nil, err
	}
	s, err := layered.New(client, pg, &layered.Options{Prefix: t.prefix, Logger: o.Logger})
	if err != nil {
		client.Close()
		pg.Close()
		return nil, err
	}
	return owned{Store: s, close: func() error { client.Close(); return pg.Close() }}, nil
}
