package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// chargeEvent is what the provider's server tells a scenario after it
// executed or answered a call, before the answer is sent.
type chargeEvent struct {
	Key    string
	Worker int
	First  bool // the key's first call
}

// payServer serves a provider over HTTP on loopback, as a payment API:
//
//	POST /charges?key=K&fence=F&worker=W   200 {"charge":...}; 402 declined; 409 refused (nothing charged)
//	GET  /charges/by-key?key=K&fence=F     200 {"charge":...}; 404 never executed; 409 still running
//
// A call runs to its end even when its caller has gone, as on a real
// server. after, when set, is called once a call has charged, before the
// answer; when it returns true the connection is cut instead of answered
// (the provider executed, the caller never hears).
type payServer struct {
	p     *provider
	after func(chargeEvent) (cut bool)
	srv   *http.Server
	url   string
	done  chan struct{}
}

func startPayServer(p *provider, after func(chargeEvent) bool) (*payServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &payServer{p: p, after: after, url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.charge)
	mux.HandleFunc("GET /charges/by-key", s.lookup)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *payServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	<-s.done
}

func (s *payServer) charge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fence, err1 := strconv.ParseInt(q.Get("fence"), 10, 64)
	worker, err2 := strconv.Atoi(q.Get("worker"))
	if q.Get("key") == "" || err1 != nil || err2 != nil {
		http.Error(w, "key, fence and worker are required", http.StatusBadRequest)
		return
	}
	// The caller going away does not stop the charge.
	ch, first, err := s.p.charge(context.WithoutCancel(r.Context()), worker, q.Get("key"), fence)
	switch {
	case errors.Is(err, errDeclined):
		http.Error(w, err.Error(), http.StatusPaymentRequired)
		return
	case errors.Is(err, errRefused):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if s.after != nil && s.after(chargeEvent{Key: q.Get("key"), Worker: worker, First: first}) {
		panic(http.ErrAbortHandler) // the server closes the connection without an answer
	}
	writeJSON(w, http.StatusOK, map[string]string{"charge": ch})
}

func (s *payServer) lookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fence, err := strconv.ParseInt(q.Get("fence"), 10, 64)
	if q.Get("key") == "" || err != nil {
		http.Error(w, "key and fence are required", http.StatusBadRequest)
		return
	}
	ch, err := s.p.Lookup(r.Context(), q.Get("key"), fence)
	switch {
	case errors.Is(err, errNoCharge):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"charge": ch})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// payClient is a worker's client of a payServer. A charge is a POST with
// no Idempotency-Key header on purpose: net/http's Transport resends a
// request carrying one on a reused connection that failed, which would
// make the transport itself charge twice.
type payClient struct {
	url     string
	timeout time.Duration // the caller's timeout of one charge; zero: none beyond ctx
	hc      *http.Client
}

func newPayClient(url string, timeout time.Duration) *payClient {
	return &payClient{url: url, timeout: timeout, hc: &http.Client{Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 16}}}
}

func (c *payClient) close() { c.hc.CloseIdleConnections() }

// Charge sends the charge. A failure before the request was written
// (a refused dial) charged nothing; after it, the outcome is unknown.
func (c *payClient) Charge(ctx context.Context, worker int, key string, fence int64) (string, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var wrote atomic.Bool // set by the transport's write loop, possibly after Do returned
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }})
	u := c.url + "/charges?" + url.Values{"key": {key}, "fence": {strconv.FormatInt(fence, 10)}, "worker": {strconv.Itoa(worker)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", err
	}
	status, charge, err := c.do(req)
	switch {
	case err != nil && wrote.Load():
		return "", unknownCall(err)
	case err != nil:
		return "", fmt.Errorf("%w: not sent: %w", errDeclined, err)
	case status == http.StatusOK:
		return charge, nil
	case status == http.StatusPaymentRequired:
		return "", errDeclined
	case status == http.StatusConflict:
		return "", errRefused
	}
	return "", unknownCall(fmt.Errorf("provider answered %d", status))
}

// Lookup asks the provider for the charge of key.
func (c *payClient) Lookup(ctx context.Context, key string, fence int64) (string, error) {
	u := c.url + "/charges/by-key?" + url.Values{"key": {key}, "fence": {strconv.FormatInt(fence, 10)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	status, charge, err := c.do(req)
	switch {
	case err != nil:
		return "", err
	case status == http.StatusOK:
		return charge, nil
	case status == http.StatusNotFound:
		return "", errNoCharge
	}
	return "", errChargeRunning
}

// do sends req and reads a JSON {"charge"} answer of status 200.
func (c *payClient) do(req *http.Request) (int, string, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, "", nil
	}
	var v struct{ Charge string }
	if err := json.Unmarshal(body, &v); err != nil || v.Charge == "" {
		return 0, "", fmt.Errorf("lab: provider answer %q: %v", body, err)
	}
	return http.StatusOK, v.Charge, nil
}

// unknownCall marks a charge whose request reached the provider, or may
// have, with no answer: it may have charged.
func unknownCall(err error) error {
	return idem.OutcomeUnknown(fmt.Errorf("provider call: %w", err), "the charge may have reached the provider, and no answer came back")
}

// reconcileWith returns an Options.Reconcile that asks pay about a key
// whose outcome is unknown: its charge is the result to record; no charge
// (and none can come: the provider refuses the fence from now on) is not
// executed; a call still running, or a failed lookup, leaves it unknown.
func reconcileWith(pay payments) func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
	return func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
		ch, err := pay.Lookup(ctx, rec.Key, rec.Fence)
		switch {
		case err == nil:
			return idem.Resolution{Verdict: idem.VerdictCompleted, Result: store.Result{Body: []byte(ch)}}, nil
		case errors.Is(err, errNoCharge):
			return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
		case errors.Is(err, errChargeRunning):
			return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
		}
		return idem.Resolution{}, err
	}
}
