package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store/pgstore"
)

// runMigrate applies the PostgreSQL store's migrations to --schema, the
// schema that idem serve and idem keys with the same --schema use: for
// deployments that migrate as a separate step, as a role that may CREATE,
// and run the gateway with --no-migrate. It says what it applied, or that
// there was nothing to apply.
func runMigrate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	storeURI := fs.String("store", "", "the PostgreSQL store to migrate: postgres://..., or the layered REDIS_URI+postgres://... that idem serve takes (required)")
	schema := fs.String("schema", pgstore.DefaultSchema, schemaUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	uri := *storeURI
	if _, pg, layered := strings.Cut(uri, "+postgres"); layered {
		uri = "postgres" + pg // the layered store's authority
	}
	if !strings.HasPrefix(uri, "postgres://") && !strings.HasPrefix(uri, "postgresql://") {
		return fmt.Errorf("%w: --store must be a postgres:// URI (or a layered REDIS_URI+postgres://...)", errUsage)
	}
	if err := pgstore.CheckSchema(*schema); err != nil {
		return fmt.Errorf("%w: --schema: %w", errUsage, err)
	}
	pool, err := pgxpool.New(ctx, uri)
	if err != nil {
		return fmt.Errorf("%w: --store: %w", errUsage, err)
	}
	defer pool.Close()
	opts := &pgstore.Options{Schema: *schema}
	pending, err := pgstore.Pending(ctx, pool, opts)
	if err != nil {
		return err
	}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		return err
	}
	// What was pending before: applied by this Migrate, or by another
	// process migrating the same schema at the same moment.
	if len(pending) == 0 {
		fmt.Fprintf(stdout, "schema %s is up to date: nothing to apply\n", *schema)
		return nil
	}
	fmt.Fprintf(stdout, "schema %s: applied %d migrations: %s\n", *schema, len(pending), strings.Join(pending, ", "))
	return nil
}
