package pgstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// Pending lists what Migrate would apply, without applying it: every
// migration for a schema that does not exist, the later ones for a schema
// of an older release, none once migrated.
func TestPending(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	// Every migration the package ships, from its folder: what Pending
	// must name for a schema that has none of them.
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) < 8 {
		t.Fatalf("the migrations folder: %q, %v", files, err)
	}
	var all []string
	for _, f := range files {
		all = append(all, filepath.Base(f))
	}
	opts := &pgstore.Options{Schema: schema}
	if got, err := pgstore.Pending(ctx, pool, &pgstore.Options{Schema: testenv.SchemaName(t)}); err != nil || !slices.Equal(got, all) {
		t.Fatalf("Pending of a schema that does not exist = %q, %v; want %q", got, err, all)
	}
	if got, err := pgstore.Pending(ctx, pool, opts); err != nil || !slices.Equal(got, all) {
		t.Fatalf("Pending of an empty schema = %q, %v; want %q", got, err, all)
	}
	if err := pgstore.MigrateTo(ctx, pool, schema, 4); err != nil {
		t.Fatal(err)
	}
	if got, err := pgstore.Pending(ctx, pool, opts); err != nil || !slices.Equal(got, all[4:]) {
		t.Fatalf("Pending at version 4 = %q, %v; want %q", got, err, all[4:])
	}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	if got, err := pgstore.Pending(ctx, pool, opts); err != nil || len(got) != 0 {
		t.Fatalf("Pending after Migrate = %q, %v; want none", got, err)
	}
	if _, err := pgstore.Pending(ctx, pool, &pgstore.Options{Schema: "Bad-Name"}); !errors.Is(err, pgstore.ErrConfig) {
		t.Fatalf("Pending of a bad schema name = %v; want ErrConfig", err)
	}
}
