package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store/memstore"
)

// runDemo shows the gateway at work on one machine, with nothing to
// install: a toy payment API that charges on every call, a burst of
// duplicate requests and retries sent straight to it, and the same burst
// sent through the gateway.
func runDemo(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	keys := fs.Int("keys", 10, "idempotency keys (payments) to send")
	burst := fs.Int("burst", 20, "concurrent duplicate requests per key")
	retries := fs.Int("retries", 3, "sequential retries per key after the burst")
	latency := fs.Duration("latency", 100*time.Millisecond, "how long the payment API takes per charge")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *keys < 1 || *burst < 1 || *retries < 0 || *keys**burst > 10000 {
		return fmt.Errorf("%w: want --keys >= 1, --burst >= 1, --retries >= 0 and at most 10000 requests in a burst", errUsage)
	}
	var charges atomic.Int64
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		time.Sleep(*latency)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d","key":%q}`+"\n", n, r.Header.Get("Idempotency-Key"))
	}))
	defer payments.Close()

	direct := fire(ctx, payments.URL, *keys, *burst, *retries)
	direct.charges = charges.Swap(0)

	store, err := memstore.New(nil)
	if err != nil {
		return err
	}
	up, _ := url.Parse(payments.URL)
	g, err := gateway.New(gateway.Config{Listen: "127.0.0.1:0", Upstream: up, Store: store,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx, func(proxy, _ net.Addr) { addr <- proxy }) }()
	var gw net.Addr
	select {
	case gw = <-addr:
	case err := <-done:
		stop()
		return err
	}
	through := fire(ctx, "http://"+gw.String(), *keys, *burst, *retries)
	through.charges = charges.Load()
	stop()
	if err := <-done; err != nil {
		return err
	}

	fmt.Fprintf(stdout, "%d payments, each sent as a burst of %d concurrent duplicates, then %d retries:\n\n", *keys, *burst, *retries)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\trequests\tcharges made\texecuted\treplayed\tconflicts (409)\terrors\t")
	for _, row := range []struct {
		name string
		t    tally
	}{{"straight to the payment API", direct}, {"through idem", through}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", row.name, row.t.requests, row.t.charges, row.t.executed, row.t.replayed, row.t.conflicts, row.t.errors)
	}
	tw.Flush()
	if through.charges != int64(*keys) {
		return fmt.Errorf("through idem: %d charges for %d keys", through.charges, *keys)
	}
	fmt.Fprintf(stdout, "\nThrough idem: exactly one charge per key.\n")
	return nil
}

type tally struct {
	requests, charges, executed, replayed, conflicts, errors int64
}

// fire sends, for each key, a burst of concurrent POSTs and then sequential
// retries, and counts the answers.
func fire(ctx context.Context, base string, keys, burst, retries int) tally {
	var t tally
	var mu sync.Mutex
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: burst}}
	defer client.CloseIdleConnections()
	send := func(key string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/charges", strings.NewReader(`{"amount":4200,"currency":"eur"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer demo-client") // keys are scoped per client; the gateway refuses anonymous ones
		resp, err := client.Do(req)
		mu.Lock()
		defer mu.Unlock()
		t.requests++
		switch {
		case err != nil:
			t.errors++
			return
		case resp.StatusCode == http.StatusConflict:
			t.conflicts++
		case resp.Header.Get("Idempotent-Replayed") == "true":
			t.replayed++
		case resp.StatusCode < 300:
			t.executed++
		default:
			t.errors++
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("demo-payment-%d", k)
		wg.Go(func() {
			var burstWG sync.WaitGroup
			for range burst {
				burstWG.Go(func() { send(key) })
			}
			burstWG.Wait()
			for range retries {
				send(key)
			}
		})
	}
	wg.Wait()
	return t
}
