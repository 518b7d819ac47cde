package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/idemkit/idem/store/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// runMigrate applies the PostgreSQL store's migrations; idem serve does the
// same at start, this is for deployments that migrate as a separate step.
func runMigrate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	storeURI := fs.String("store", "", "postgres://... of the database to migrate (required)")
	schema := fs.String("schema", pgstore.DefaultSchema, "the schema that holds idem's tables")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !strings.HasPrefix(*storeURI, "postgres://") && !strings.HasPrefix(*storeURI, "postgresql://") {
		return fmt.Errorf("%w: --store must be a postgres:// URI", errUsage)
	}
	pool, err := pgxpool.New(ctx, *storeURI)
	if err != nil {
		return fmt.Errorf("%w: --store: %w", errUsage, err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: *schema}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema %s is up to date\n", *schema)
	return nil
}
