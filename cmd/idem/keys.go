package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/gateway"
)

func runKeys(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	storeURI := fs.String("store", "", "the store to talk to (required; see 'idem help serve')")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 3 || (fs.Arg(0) != "get" && fs.Arg(0) != "delete") {
		return fmt.Errorf("%w: idem keys [--store URI] get|delete TENANT KEY (TENANT %q is the empty tenant)", errUsage, gateway.EmptyTenant)
	}
	if *storeURI == "" || *storeURI == "memory" {
		return fmt.Errorf("%w: --store must name a shared store (redis://, postgres://...): the memory store lives inside one gateway; use its admin API", errUsage)
	}
	store, closeStore, err := gateway.OpenStore(ctx, *storeURI, nil)
	if err != nil {
		return fmt.Errorf("%w: --store: %w", errUsage, err)
	}
	defer closeStore()
	e, err := idem.New(store, nil)
	if err != nil {
		return err
	}
	id := idem.ID{Tenant: fs.Arg(1), Key: fs.Arg(2)}
	if id.Tenant == gateway.EmptyTenant {
		id.Tenant = ""
	}
	if fs.Arg(0) == "delete" {
		existed, err := e.Delete(ctx, id)
		if err != nil {
			return err
		}
		if !existed {
			return fmt.Errorf("no record for tenant %q key %q", id.Tenant, id.Key)
		}
		fmt.Fprintln(stdout, "deleted")
		return nil
	}
	rec, err := e.Get(ctx, id)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(gateway.ViewRecord(rec))
}
