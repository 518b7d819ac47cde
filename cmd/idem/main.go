// Command idem is the idempotency gateway and its tools.
//
//	idem serve --upstream URL [flags]   an idempotency gateway in front of any HTTP API
//	idem demo                           the gateway in front of a toy payment API, under a burst of retries
//	idem keys get|delete TENANT KEY     inspect or invalidate a key, through a gateway's admin API
//	idem keys list --unknown            list the UNKNOWN keys
//	idem keys resolve --fence N ...     settle an UNKNOWN key: completed (with its response) or not executed
//	idem migrate --store postgres://... create or update the PostgreSQL store's tables
//	idem lab                            the breach lab: real faults, the naive lock against idem
//	idem probe URL                      test whether an API honours Idempotency-Key
//	idem version                        the version, the VCS revision and the Go version it was built from
//
// Every flag can also be set by an environment variable: IDEM_ and the flag
// name in capitals, with '-' as '_' (--store is IDEM_STORE).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/lab"
)

// command is one subcommand of idem.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"serve":   {"run the idempotency gateway in front of an upstream HTTP API", runServe},
	"demo":    {"run the gateway in front of a toy payment API and fire duplicate requests at it", runDemo},
	"lab":     {"reproduce the failure vectors of the naive lock with real faults, against idem", runLab},
	"keys":    {"inspect (get), invalidate (delete), list UNKNOWN (list --unknown) or resolve UNKNOWN keys, through a running gateway's admin API (audited)", runKeys},
	"migrate": {"create or update the PostgreSQL store's tables", runMigrate},
	"probe":   {"test whether an HTTP API honours Idempotency-Key (exits 1 on a violation)", runProbe},
	"version": {"print the version", runVersion},
}

// errUsage marks an error whose message is a usage text: exit status 2.
var errUsage = errors.New("usage")

func main() {
	lab.MaybeRunWorker() // a worker process of `idem lab` runs and exits here
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if _, ok := commands[args[1]]; ok {
				return run(ctx, []string{args[1], "-h"}, stdout, stderr)
			}
		}
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "idem: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "idem "+args[0]+":", err)
		return 2
	default:
		fmt.Fprintln(stderr, "idem "+args[0]+":", err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "idem: exactly-once side effects behind an Idempotency-Key.\n\nUsage: idem COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'idem help COMMAND' for its flags. Every flag can also be set as IDEM_FLAG_NAME in the environment.")
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its IDEM_ environment variable: resolveFlags without
// a config file.
func parseFlags(fs *flag.FlagSet, args []string, cmdLineOnly ...string) error {
	_, err := resolveFlags(fs, args, "", cmdLineOnly...)
	return err
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	b := gateway.ReadBuild()
	revision := "revision " + b.Revision
	switch {
	case b.Revision == "":
		revision = "no revision: built without VCS stamping"
	case b.Modified:
		revision += ", modified"
	}
	fmt.Fprintf(stdout, "idem %s (%s, %s)\n", b.Version, revision, b.Go)
	return nil
}

// version is the module version the binary was built at, or (devel).
func version() string { return gateway.ReadBuild().Version }
