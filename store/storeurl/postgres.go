package storeurl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
// may start at once) to the schema the URL names (?schema=, else
// pgstore.DefaultSchema). The store reaps its expired rows every minute
// (pgstore.DefaultReapInterval); several processes share the work. Its
// Close stops the reaper and closes the pool.
func openPostgres(ctx context.Context, uri string, log *slog.Logger) (Store, error) {
	uri, schema, err := takeParam(uri, "schema")
	if err != nil {
		return nil, err
	}
	opts := &pgstore.Options{Schema: schema, Logger: log}
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
	migrateCtx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if err := pgstore.Migrate(migrateCtx, pool, opts); err != nil {
		pool.Close()
		if errors.Is(err, pgstore.ErrConfig) { // the schema's name
			return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
		}
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
func openLayered(ctx context.Context, redisURI, pgURI string, log *slog.Logger) (Store, error) {
	redisURI, prefix, err := takeParam(redisURI, "prefix")
	if err != nil {
		return nil, err
	}
	client, err := redisstore.ParseURL(redisURI)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	pg, err := openPostgres(ctx, pgURI, log)
	if err != nil {
		client.Close()
		return nil, err
	}
	s, err := layered.New(client, pg, &layered.Options{Prefix: prefix, Logger: log})
	if err != nil {
		client.Close()
		pg.Close()
		if prefix != "" {
			return nil, fmt.Errorf("%w: %w", ErrBadURL, err)
		}
		return nil, err
	}
	return owned{Store: s, close: func() error { client.Close(); return pg.Close() }}, nil
}
