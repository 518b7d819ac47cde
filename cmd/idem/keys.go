package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storeurl"
)

const keysUsage = `idem keys [--store URI] get TENANT KEY
  idem keys [--store URI] delete [--force] TENANT KEY
  idem keys [--store URI] list --unknown [--tenant TENANT]
  idem keys [--store URI] resolve --fence N (--not-executed | --status CODE [--header 'Name: value']... [--body TEXT | --body-file PATH]) TENANT KEY
(TENANT %q is the empty tenant, "--" the tenant "-": n dashes name the tenant of n-1 dashes)`

// headerList is a repeatable --header 'Name: value' flag.
type headerList [][2]string

func (h *headerList) String() string { return fmt.Sprint(*h) }

func (h *headerList) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return errors.New("want 'Name: value'")
	}
	*h = append(*h, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	return nil
}

func runKeys(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	storeURI := fs.String("store", "", "the store to talk to (required; see 'idem help serve')")
	unknown := fs.Bool("unknown", false, "list: the keys in state UNKNOWN (the only state listed)")
	tenant := fs.String("tenant", "", "list: only this tenant's keys (default: all tenants; \"-\" is the empty tenant)")
	fence := fs.Int64("fence", 0, "resolve: the UNKNOWN record's fence (see 'idem keys get')")
	notExecuted := fs.Bool("not-executed", false, "resolve: the request did not take effect; release the key so the next request runs it")
	status := fs.Int("status", 0, "resolve: the request took effect; record this status and replay it")
	var headers headerList
	fs.Var(&headers, "header", "resolve: a header of the recorded response, 'Name: value' (repeatable)")
	body := fs.String("body", "", "resolve: the body of the recorded response")
	bodyFile := fs.String("body-file", "", "resolve: read the body of the recorded response from this file")
	force := fs.Bool("force", false, "delete: also a key in flight (PROCESSING) or UNKNOWN, which lets the next request run it again")
	schema := fs.String("schema", pgstore.DefaultSchema, schemaUsage)
	noMigrate := fs.Bool("no-migrate", false, noMigrateUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Flags may also follow the verb: parse what comes after it again.
	verb, rest := fs.Arg(0), fs.Args()
	if len(rest) > 0 {
		if err := fs.Parse(rest[1:]); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if want, ok := map[string]int{"get": 2, "delete": 2, "list": 0, "resolve": 2}[verb]; !ok || fs.NArg() != want {
		return fmt.Errorf("%w: "+keysUsage, errUsage, gateway.EmptyTenant)
	}
	if verb == "list" && !*unknown {
		return fmt.Errorf("%w: idem keys list lists the UNKNOWN keys only: add --unknown", errUsage)
	}
	if *storeURI == "" || *storeURI == "memory" {
		return fmt.Errorf("%w: --store must name a shared store (redis://, postgres://...): the memory store lives inside one gateway; use its admin API", errUsage)
	}
	var res gateway.Resolution
	if verb == "resolve" {
		var err error
		if res, err = resolutionFromFlags(*fence, *notExecuted, *status, headers, set["body"], *body, *bodyFile); err != nil {
			return err
		}
	}
	opts := &gateway.StoreOptions{NoMigrate: *noMigrate}
	if set["schema"] {
		opts.Schema = *schema
	}
	if err := gateway.CheckStore(*storeURI, opts); err != nil {
		return fmt.Errorf("%w: --store: %w", errUsage, err)
	}
	st, closeStore, err := gateway.OpenStore(ctx, *storeURI, opts)
	switch {
	case errors.Is(err, storeurl.ErrNotMigrated):
		return fmt.Errorf("%w: run 'idem migrate' with the same --store and --schema first", err)
	case err != nil:
		return err
	}
	defer closeStore()
	e, err := idem.New(st, nil)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	if verb == "list" {
		return listUnknown(ctx, e, enc, set["tenant"], *tenant)
	}
	id := store.ID{Tenant: gateway.ParseTenant(fs.Arg(0)), Key: fs.Arg(1)}
	switch verb {
	case "delete":
		del := e.Delete
		if *force {
			del = e.ForceDelete
		}
		existed, err := del(ctx, id)
		switch {
		case errors.Is(err, idem.ErrInFlight):
			return fmt.Errorf("%w: deleting it would let a retry run it a second time; wait until it finishes, or pass --force", err)
		case errors.Is(err, idem.ErrOutcomeUnknown):
			return fmt.Errorf("%w: deleting it would let a retry run it again; settle it with idem keys resolve, or pass --force", err)
		case err != nil:
			return err
		}
		if !existed {
			return fmt.Errorf("no record for tenant %q key %q", id.Tenant, id.Key)
		}
		fmt.Fprintln(stdout, "deleted")
		return nil
	case "resolve":
		result, _ := res.Result() // checked by resolutionFromFlags
		if err := e.Resolve(ctx, id, res.Fence, result); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "resolved:", res.Outcome)
		return nil
	}
	rec, err := e.Get(ctx, id)
	if err != nil {
		return err
	}
	enc.SetIndent("", "  ")
	return enc.Encode(gateway.ViewRecord(rec))
}

// listUnknown prints every UNKNOWN key, one JSON object a line, page by page.
func listUnknown(ctx context.Context, e *idem.Engine, enc *json.Encoder, oneTenant bool, tenant string) error {
	p := store.ListParams{Tenant: gateway.ParseTenant(tenant), AllTenants: !oneTenant}
	for {
		page, err := e.ListUnknown(ctx, p)
		if err != nil {
			return err
		}
		for _, rec := range page.Records {
			if err := enc.Encode(gateway.ViewRecord(rec)); err != nil {
				return err
			}
		}
		if p.After = page.Next; p.After == "" {
			return nil
		}
	}
}

// resolutionFromFlags builds and checks the operator's resolution.
func resolutionFromFlags(fence int64, notExecuted bool, status int, headers headerList, hasBody bool, body, bodyFile string) (gateway.Resolution, error) {
	res := gateway.Resolution{Fence: fence, Outcome: "completed", Status: status}
	if notExecuted {
		if status != 0 || len(headers) > 0 || hasBody || bodyFile != "" {
			return res, fmt.Errorf("%w: --not-executed takes no --status, --header, --body or --body-file", errUsage)
		}
		res.Outcome, res.Status = "not_executed", 0
	} else {
		if status == 0 {
			return res, fmt.Errorf("%w: resolve needs --not-executed, or --status for a request that took effect", errUsage)
		}
		for _, kv := range headers {
			if res.Header == nil {
				res.Header = http.Header{}
			}
			res.Header.Add(kv[0], kv[1])
		}
		switch {
		case hasBody && bodyFile != "":
			return res, fmt.Errorf("%w: give --body or --body-file, not both", errUsage)
		case hasBody:
			res.Body = &body
		case bodyFile != "":
			b, err := os.ReadFile(bodyFile)
			if err != nil {
				return res, fmt.Errorf("%w: --body-file: %w", errUsage, err)
			}
			s := string(b)
			res.Body = &s
		}
	}
	if _, err := res.Result(); err != nil {
		return res, fmt.Errorf("%w: %w", errUsage, err)
	}
	return res, nil
}
