package storeurl

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store"
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

// openPostgres opens the PostgreSQL store and applies its migrations (they
// are idempotent and serialised by an advisory lock, so several processes
// may start at once), or with o.NoMigrate checks that none is missing. The
// store reaps its expired rows every minute (pgstore.DefaultReapInterval);
// several processes share the work.
func openPostgres(ctx context.Context, uri string, o *Options) (*pgstore.Store, func() error, error) {
	cfg, err := pgxpool.ParseConfig(uri)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	po := &pgstore.Options{Schema: o.Schema, Logger: o.Logger}
	migrateCtx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if o.NoMigrate {
		pending, err := pgstore.Pending(migrateCtx, pool, po)
		if err == nil && len(pending) > 0 {
			err = fmt.Errorf("%w: schema %s lacks %d migrations (%s)", ErrNotMigrated, cmp.Or(o.Schema, pgstore.DefaultSchema),
				len(pending), strings.Join(pending, ", "))
		}
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("storeurl: checking the PostgreSQL store's schema: %w", err)
		}
	} else if err := pgstore.Migrate(migrateCtx, pool, po); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("storeurl: migrating the PostgreSQL store: %w", err)
	}
	s, err := pgstore.New(pool, po)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, func() error { s.Close(); pool.Close(); return nil }, nil
}

// openLayered opens Redis in front of PostgreSQL.
func openLayered(ctx context.Context, redisURI, pgURI string, o *Options) (store.Store, func() error, error) {
	client, err := redisstore.ParseURL(redisURI)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	pg, closePG, err := openPostgres(ctx, pgURI, o)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	s, err := layered.New(client, pg, &layered.Options{Logger: o.Logger})
	if err != nil {
		client.Close()
		closePG()
		return nil, nil, err
	}
	return s, func() error { client.Close(); return closePG() }, nil
}
