package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store/pgstore"
)

// postgres is the PostgreSQL store in a schema of its own.
type postgres struct {
	pool   *pgxpool.Pool
	admin  *pgx.Conn
	schema string
}

// maxPGConns bounds the pool: the test server is shared, and PostgreSQL's
// default max_connections is 100. Goroutines beyond it wait for a
// connection, which the curve shows.
const maxPGConns = 32

func newPostgres(ctx context.Context, url string) (*postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	schema := fmt.Sprintf("curve_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close(ctx)
		return nil, err
	}
	p := &postgres{admin: admin, schema: schema}
	cfg.MaxConns = maxPGConns
	if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, errors.Join(err, p.close())
	}
	if err := pgstore.Migrate(ctx, p.pool, &pgstore.Options{Schema: schema}); err != nil {
		return nil, errors.Join(err, p.close())
	}
	return p, nil
}

// close drops the schema and closes the connections.
func (p *postgres) close() error {
	if p.pool != nil {
		p.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.admin.Exec(ctx, "DROP SCHEMA "+p.schema+" CASCADE")
	return errors.Join(err, p.admin.Close(ctx))
}

func (p *postgres) impl() (impl, backend, error) {
	s, err := pgstore.New(p.pool, &pgstore.Options{Schema: p.schema, ReapInterval: -1}) // no reaper: the curve deletes its rows and measures the table
	if err != nil {
		return impl{}, backend{}, err
	}
	records := p.schema + ".records"
	i, err := engineImpl("idem-postgres", "postgres", s, func(ctx context.Context, tag string, n int64) error {
		_, err := p.pool.Exec(ctx, "DELETE FROM "+records+" WHERE tenant_id = $1", tag)
		return err
	})
	b := backend{
		name: "postgres", measuredBy: "pg_total_relation_size(records)",
		// One record written by the store, then copied by INSERT ... SELECT
		// with its key and a fresh fence.
		fill: func(ctx context.Context, from, to int64) error {
			if from >= to {
				return nil
			}
			tmpl, err := fillTemplate(ctx, s)
			if err != nil {
				return err
			}
			rows, err := p.pool.Query(ctx, `SELECT column_name FROM information_schema.columns
				WHERE table_schema = $1 AND table_name = 'records' ORDER BY ordinal_position`, p.schema)
			if err != nil {
				return err
			}
			cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			sel := make([]string, len(cols))
			for i, c := range cols {
				switch c {
				case "idempotency_key":
					sel[i] = "g::text"
				case "fence":
					sel[i] = "nextval('" + p.schema + ".fence_seq')"
				default:
					sel[i] = "t." + c
				}
			}
			q := "INSERT INTO " + records + " (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(sel, ", ") +
				" FROM " + records + " t, generate_series($1::bigint, $2::bigint) g WHERE t.tenant_id = $3 AND t.idempotency_key = $4"
			const batch = 100_000
			for lo := from; lo < to; lo += batch {
				if _, err := p.pool.Exec(ctx, q, lo, min(lo+batch, to)-1, tmpl.Tenant, tmpl.Key); err != nil {
					return err
				}
			}
			_, err = p.pool.Exec(ctx, "DELETE FROM "+records+" WHERE tenant_id = $1 AND idempotency_key = $2", tmpl.Tenant, tmpl.Key)
			if err == nil {
				_, err = p.pool.Exec(ctx, "VACUUM ANALYZE "+records)
			}
			return err
		},
		size: func(ctx context.Context) (int64, error) {
			var n int64
			err := p.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", records).Scan(&n)
			return n, err
		},
	}
	return i, b, err
}
