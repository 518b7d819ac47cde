package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemkit/idem/store/storeurl"
)

// runMigrate applies the PostgreSQL store's migrations to the schema of
// --store's ?schema=, the schema that idem serve with the same --store
// uses: for deployments that migrate as a separate step, as a role that
// may CREATE, and run the gateway with --no-migrate. It says what it
// applied, or that there was nothing to apply.
func runMigrate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if err := refuseSchemaFlag(args); err != nil {
		return err
	}
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	storeURI := fs.String("store", "", "the PostgreSQL store to migrate, as idem serve's --store names it: postgres://...[?schema=NAME], or the layered REDIS_URI+postgres://... (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	schema, applied, err := storeurl.Migrate(ctx, *storeURI)
	switch {
	case errors.Is(err, storeurl.ErrBadURL):
		return fmt.Errorf("%w: --store: %w", errUsage, err)
	case err != nil:
		return err
	case len(applied) == 0:
		fmt.Fprintf(stdout, "schema %s is up to date: nothing to apply\n", schema)
	default:
		// What was pending before: applied by this Migrate, or by another
		// process migrating the same schema at the same moment.
		fmt.Fprintf(stdout, "schema %s: applied %d migrations: %s\n", schema, len(applied), strings.Join(applied, ", "))
	}
	return nil
}

// refuseSchemaFlag refuses --schema on the command line and IDEM_SCHEMA:
// the PostgreSQL schema is the store URL's ?schema=, its one home, so that
// idem migrate and idem serve given the same --store use the same schema;
// a --schema that idem migrate once took must not be dropped silently.
func refuseSchemaFlag(args []string) error {
	if _, inEnv := os.LookupEnv(envName("schema")); !inEnv && !givenOnCommandLine(args, "schema") {
		return nil
	}
	return fmt.Errorf("%w: --schema and %s are gone: the schema is part of the store's URL, --store postgres://...?schema=NAME "+
		"(the PostgreSQL part of a layered URL takes it too), so that idem migrate and idem serve name the same one", errUsage, envName("schema"))
}

// givenOnCommandLine reports whether args give the flag name (-name,
// --name, --name=value), which a command no longer defines and must
// refuse with a message of its own.
func givenOnCommandLine(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if flagName, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && flagName == name {
			return true
		}
	}
	return false
}
