package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// doTableRow is one row of the table in Do's documentation.
type doTableRow struct {
	returns   string // the first column, continuation lines included
	retryable bool   // the last column
}

// doTable reads the table of Do's documentation from do.go: the rows of
// the block that starts with the header "Do returns".
func doTable(t *testing.T) []doTableRow {
	t.Helper()
	src, err := os.ReadFile("do.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(src), "//\tDo returns")
	if !ok {
		t.Fatal(`do.go: no table with the header "Do returns" in Do's documentation`)
	}
	block, _, _ = strings.Cut(block, "\n//\n")
	lines := strings.Split(block, "\n")[1:] // past the header
	cols := regexp.MustCompile(`\s{2,}`)
	var rows []doTableRow
	for _, line := range lines {
		text, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			t.Fatalf("do.go: table line %q is not a //<tab> line", line)
		}
		cells := cols.Split(strings.TrimSpace(text), -1)
		if !strings.HasPrefix(text, " ") { // a row starts at the left edge
			last := cells[len(cells)-1]
			if last != "true" && last != "false" {
				t.Fatalf("do.go: table row %q does not end with Retryable's answer, true or false", text)
			}
			rows = append(rows, doTableRow{returns: cells[0], retryable: last == "true"})
			continue
		}
		if len(rows) == 0 {
			t.Fatalf("do.go: table continues a row before any: %q", text)
		}
		if strings.HasPrefix(text, "  ") && !strings.HasPrefix(text, "   ") { // "  more of the first column"
			rows[len(rows)-1].returns += " " + cells[0]
		}
	}
	return rows
}

// doErrors names the errors the table's first column may name.
var doErrors = map[string]error{
	"ErrInFlight": idem.ErrInFlight, "ErrStore": idem.ErrStore, "ErrShutdown": idem.ErrShutdown,
	"ErrMismatch": idem.ErrMismatch, "ErrKeyExpired": idem.ErrKeyExpired, "ErrInvalidKey": idem.ErrInvalidKey,
	"ErrInvalidTenant": idem.ErrInvalidTenant, "ErrInvalidFingerprint": idem.ErrInvalidFingerprint,
	"ErrInvalidRequest": idem.ErrInvalidRequest, "ErrOutcomeUnknown": idem.ErrOutcomeUnknown,
	"ErrLeaseLost": idem.ErrLeaseLost, "ErrResultTooLarge": idem.ErrResultTooLarge,
}

// doCall is what one real Do call returned.
type doCall struct {
	out      []byte
	replayed bool
	err      error
}

// TestDoErrorTable holds every row of Do's table to real Do calls: each
// row's calls return what its first column says (the errors it names,
// the output or none, replayed or not), and Retryable answers what its
// last column says. A row without calls here, or calls without a row,
// fail: the table cannot drift from the code.
func TestDoErrorTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEngine(t, mustMem(t), &idem.Options{MaxResultBytes: 4, Retention: time.Minute, KeyRetention: time.Hour})
		ok := func(context.Context, *idem.Lease) ([]byte, error) { return []byte("ok"), nil }
		do := func(e *idem.Engine, key idem.Request, fn func(context.Context, *idem.Lease) ([]byte, error)) doCall {
			out, replayed, err := e.Do(ctx, key, fn)
			return doCall{out, replayed, err}
		}
		k := func(key string) idem.Request { return idem.Request{Tenant: "t", Key: key, Fingerprint: "fp"} }

		first := do(e, k("done"), ok)
		replay := do(e, k("done"), ok)
		inFlight := func() doCall {
			started, finish, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				do(e, k("busy"), func(context.Context, *idem.Lease) ([]byte, error) { close(started); <-finish; return nil, nil })
			}()
			<-started
			c := do(e, k("busy"), ok)
			close(finish)
			<-done
			return c
		}()
		expired := func() doCall {
			do(e, k("old"), ok)
			time.Sleep(2 * time.Minute) // past Retention, within KeyRetention
			return do(e, k("old"), ok)
		}()
		down := newEngine(t, acquireFails{mustMem(t)}, nil)
		shut := newEngine(t, mustMem(t), nil)
		if err := shut.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		unknownFirst := do(e, k("cut"), func(context.Context, *idem.Lease) ([]byte, error) {
			return nil, idem.OutcomeUnknown(errors.New("no answer"), "")
		})
		completeDown := newEngine(t, completeFails{mustMem(t)}, &idem.Options{MaxHeld: -1})

		calls := map[string][]doCall{
			"out, replayed false, nil":     {first},
			"out, replayed true, nil":      {replay},
			"*InFlightError (ErrInFlight)": {inFlight},
			"ErrStore, out nil":            {do(down, k("x"), ok)},
			"ErrShutdown":                  {do(shut, k("x"), ok)},
			"NotRun's error": {
				do(e, k("declined"), func(context.Context, *idem.Lease) ([]byte, error) { return nil, idem.NotRun(errors.New("declined")) }),
				do(e, k("stopped"), func(_ context.Context, l *idem.Lease) ([]byte, error) {
					return nil, idem.NotRun(fmt.Errorf("checked: %w", idem.ErrLeaseExpired))
				}),
			},
			"ErrMismatch":   {do(e, idem.Request{Tenant: "t", Key: "done", Fingerprint: "other"}, ok)},
			"ErrKeyExpired": {expired},
			"ErrInvalidKey, ErrInvalidTenant, ErrInvalidFingerprint, ErrInvalidRequest": {
				do(e, k(""), ok),
				do(e, idem.Request{Tenant: "t\n", Key: "k", Fingerprint: "fp"}, ok),
				do(e, idem.Request{Key: "k", Fingerprint: "fp\x00"}, ok),
				do(e, idem.Request{Key: "k"}, ok),
			},
			"*OutcomeUnknownError (fn's own error, ErrOutcomeUnknown)": {
				unknownFirst,
				do(e, k("failed"), func(context.Context, *idem.Lease) ([]byte, error) { return nil, errors.New("provider: 502") }), // unmarked: it may have come after the effect
				do(e, k("cut"), ok), // a later call finds the key UNKNOWN
				do(e, k("cancelled"), func(context.Context, *idem.Lease) ([]byte, error) { return nil, context.Canceled }),
				do(e, k("checked"), func(_ context.Context, l *idem.Lease) ([]byte, error) {
					return nil, fmt.Errorf("checked: %w", idem.ErrLeaseExpired) // unmarked: it may have been cut in flight
				}),
			},
			"out, ErrLeaseLost": {do(e, k("deleted"), func(ctx context.Context, l *idem.Lease) ([]byte, error) {
				if _, err := e.ForceDelete(ctx, l.ID()); err != nil { // an operator deletes the key while it runs
					t.Fatal(err)
				}
				return []byte("ran"), nil
			})},
			"out, *OutcomeUnknownError wrapping ErrResultTooLarge": {do(e, k("big"), func(context.Context, *idem.Lease) ([]byte, error) {
				return []byte("too large"), nil
			})},
			"out, ErrStore": {do(completeDown, k("ran"), ok)},
		}

		rows := doTable(t)
		seen := map[string]bool{}
		for _, row := range rows {
			seen[row.returns] = true
			cs, ok := calls[row.returns]
			if !ok {
				t.Errorf("Do's table row %q has no calls in TestDoErrorTable", row.returns)
				continue
			}
			named := regexp.MustCompile(`\bErr[A-Z]\w*`).FindAllString(row.returns, -1)
			for _, name := range named {
				want, ok := doErrors[name]
				if !ok {
					t.Errorf("row %q names %s, which TestDoErrorTable does not know", row.returns, name)
					continue
				}
				if !slices.ContainsFunc(cs, func(c doCall) bool { return errors.Is(c.err, want) }) {
					t.Errorf("row %q: no call returned %s: %+v", row.returns, name, cs)
				}
			}
			for _, c := range cs {
				switch {
				case strings.HasSuffix(row.returns, ", nil") && c.err != nil:
					t.Errorf("row %q: Do returned %v; want nil", row.returns, c.err)
				case !strings.HasSuffix(row.returns, ", nil") && c.err == nil:
					t.Errorf("row %q: Do returned no error", row.returns)
				case strings.HasPrefix(row.returns, "out,") && c.out == nil:
					t.Errorf("row %q: Do returned no output (err %v)", row.returns, c.err)
				case !strings.HasPrefix(row.returns, "out,") && c.out != nil:
					t.Errorf("row %q: Do returned output %q with %v; want none", row.returns, c.out, c.err)
				case strings.Contains(row.returns, "replayed true") != c.replayed:
					t.Errorf("row %q: replayed = %t", row.returns, c.replayed)
				case strings.Contains(row.returns, "*InFlightError") && !isType[*idem.InFlightError](c.err),
					strings.Contains(row.returns, "*OutcomeUnknownError") && !isType[*idem.OutcomeUnknownError](c.err):
					t.Errorf("row %q: Do returned %T %v", row.returns, c.err, c.err)
				}
				if got := idem.Retryable(c.err); got != row.retryable {
					t.Errorf("row %q: Retryable(%v) = %t; the table says %t", row.returns, c.err, got, row.retryable)
				}
			}
		}
		for name := range calls {
			if !seen[name] {
				t.Errorf("TestDoErrorTable has calls for %q, which is no row of Do's table", name)
			}
		}
		// What Do never returns, Retryable does not call retryable.
		for _, err := range []error{errors.New("anything"), idem.ErrKeyExpired, fmt.Errorf("complete: %w", idem.ErrLeaseLost), idem.ErrNotFound} {
			if idem.Retryable(err) {
				t.Errorf("Retryable(%v) = true; want false for what it does not know", err)
			}
		}
	})
}

func isType[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// acquireFails is a real store whose Acquire fails: the store is down.
type acquireFails struct{ store.Store }

func (acquireFails) Acquire(context.Context, store.AcquireParams) (store.AcquireResult, error) {
	return store.AcquireResult{}, errors.New("injected: connection refused")
}
