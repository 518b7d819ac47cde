package check

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/testinfra/pgproc"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/layered"
	"github.com/idemkit/idem/store/pgstore"
)

// privatePG starts a PostgreSQL server of the test's own (initdb in a
// temporary directory, a free port) with the store's tables, behind a
// fault proxy; all stopped when t ends.
func privatePG(t *testing.T) (*pgproc.Server, *faultproxy.Proxy) {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem-check-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := pgproc.Start(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	pool, err := pgxpool.New(t.Context(), s.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(t.Context(), pool, &pgstore.Options{Schema: pgstore.DefaultSchema}); err != nil {
		t.Fatal(err)
	}
	return s, proxyTo(t, "127.0.0.1:"+itoa(s.Port))
}

// openPG opens a pgstore on a pool of its own through the proxy.
func openPG(s *pgproc.Server, p *faultproxy.Proxy) (*pgstore.Store, func(), error) {
	cfg, err := pgxpool.ParseConfig(s.URL(p.Addr()))
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 12
	cfg.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, nil, err
	}
	st, err := pgstore.New(pool, nil)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, func() { st.Close(); pool.Close() }, nil // Close stops the store's reaper
}

// pgEnv: a PostgreSQL server of the test's own behind the fault proxy.
func pgEnv(t *testing.T) *Env {
	s, p := privatePG(t)
	return &Env{
		NewStore: func(ctx context.Context, prefix string) (store.Store, func(), error) { return openPG(s, p) },
		Nemeses:  serverNemeses("postgres", s, p),
	}
}

// layeredEnv: Redis without persistence in front of a PostgreSQL
// authority. Redis holds copies only: its crash loses the mirror, never an
// acknowledged record.
func layeredEnv(t *testing.T) *Env {
	s, p := privatePG(t)
	r, rp := privateRedis(t, "mirror")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &Env{
		NewStore: func(ctx context.Context, prefix string) (store.Store, func(), error) {
			pg, closePG, err := openPG(s, p)
			if err != nil {
				return nil, nil, err
			}
			c := redis.NewClient(&redis.Options{Addr: rp.Addr(), ContextTimeoutEnabled: true})
			st, err := layered.New(c, pg, &layered.Options{Prefix: "mirror:" + prefix, Logger: quiet})
			if err != nil {
				c.Close()
				closePG()
				return nil, nil, err
			}
			return st, func() { c.Close(); closePG() }, nil
		},
		Nemeses: append(serverNemeses("postgres", s, p), Crash{What: "redis mirror without persistence", P: r},
			Pause{What: "redis mirror", P: r}, Net{What: "redis mirror", Proxy: rp, Mode: faultproxy.DropEverySecond}),
	}
}
