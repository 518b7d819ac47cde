package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// The codes of the admin API's answers to the console's own calls.
const (
	CodeReconcileUnavailable = "reconcile_unavailable" // 409 (admin API): POST .../reconcile without --reconcile-url: no lookup to ask
	CodeKeyNotCompleted      = "key_not_completed"     // 409 (admin API): GET .../result of a key that has no stored response
	CodeReconcileInvalid     = "reconcile_invalid"     // 400 (admin API): POST .../reconcile with a body that is not {"reason": "..."}
)

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

// serveStats answers GET /v1/stats: the ring of samples of the gateway's
// counters.
func (g *Gateway) serveStats(w http.ResponseWriter, r *http.Request) {
	u := g.current.Load().cfg.Upstream
	page := statsPage{
		IntervalMillis: g.stats.every.Milliseconds(),
		Upstream:       (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String(),
		Reconcile:      g.reconciles,
		Samples:        g.stats.snapshot(),
	}
	if err := g.ready(r.Context()); err != nil {
		page.StoreUnavailable = err.Error()
	}
	writeJSON(w, page)
}

// resultView is the answer of GET /v1/keys/{tenant}/{key}/result: a
// COMPLETED key's stored response, as JSON whatever its type, so that the
// admin API never serves a stored body as a page of its own origin.
type resultView struct {
	Status     int         `json:"status"`
	Header     http.Header `json:"header,omitempty"`
	Body       *string     `json:"body,omitempty"`        // the body, when it is UTF-8 text
	BodyBase64 *string     `json:"body_base64,omitempty"` // otherwise, in base64
	BodyBytes  int         `json:"body_bytes"`
}

func (g *Gateway) serveResult(w http.ResponseWriter, r *http.Request) {
	rec, err := g.engine.Get(r.Context(), pathID(r))
	if err != nil {
		keyError(w, err)
		return
	}
	if rec.State != store.StateCompleted || rec.Result == nil {
		idemhttp.WriteProblem(w, http.StatusConflict, CodeKeyNotCompleted,
			fmt.Sprintf("the key is %v: only a COMPLETED key has a stored response", rec.State))
		return
	}
	res := rec.Result
	v := resultView{Status: res.Status, Header: res.Header, BodyBytes: len(res.Body)}
	if utf8.Valid(res.Body) {
		s := string(res.Body)
		v.Body = &s
	} else {
		s := base64.StdEncoding.EncodeToString(res.Body)
		v.BodyBase64 = &s
	}
	writeJSON(w, v)
}

// reconcileView is the answer of POST /v1/keys/{tenant}/{key}/reconcile.
type reconcileView struct {
	Verdict string `json:"verdict"` // completed, not_executed or unknown
	Detail  string `json:"detail"`  // what happened, for the operator
	// LookupStatus is the status the lookup answered, when it answered;
	// a verdict unknown with it is a lookup that failed (a 500, a 409).
	LookupStatus int         `json:"lookup_status,omitempty"`
	Record       *RecordView `json:"record,omitempty"`
}

// serveReconcile answers POST /v1/keys/{tenant}/{key}/reconcile, whose
// body is nothing or {"reason": "..."}.
func (g *Gateway) serveReconcile(w http.ResponseWriter, r *http.Request, audit *AuditRecord) {
	reason, err := readReason(w, r)
	if err != nil {
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeReconcileInvalid, err.Error())
		return
	}
	audit.Reason = reason
	if !g.reconciles {
		idemhttp.WriteProblem(w, http.StatusConflict, CodeReconcileUnavailable,
			"the gateway has no --reconcile-url: there is no lookup to ask. Resolve the key with POST .../resolve")
		return
	}
	report := new(lookupReport)
	v, rec, err := g.engine.Reconcile(context.WithValue(r.Context(), lookupReportKey{}, report), pathID(r))
	switch {
	case errors.Is(err, idem.ErrNotUnknown):
		idemhttp.WriteProblem(w, http.StatusConflict, CodeKeyNotUnknown,
			fmt.Sprintf("the key is %v: only an UNKNOWN key is reconciled; nothing was asked", rec.State))
		return
	case err != nil:
		keyError(w, err)
		return
	}
	out := reconcileView{Verdict: v.String(), Detail: report.detail(v, rec), LookupStatus: report.status}
	audit.Outcome, audit.Detail = OutcomeUnchanged, out.Detail
	if v == idem.VerdictCompleted || v == idem.VerdictNotExecuted {
		audit.Outcome = v.String()
	}
	if v != idem.VerdictNotExecuted {
		view := ViewRecord(rec)
		out.Record = &view
	}
	writeJSON(w, out)
}

// lookupReportKey is the context key of the lookupReport of an admin
// reconciliation.
type lookupReportKey struct{}

// lookupReport is what the lookup did during one admin reconciliation:
// the engine keeps a failed lookup's error to its log, and the operator
// who asked wants it on the page.
type lookupReport struct {
	asked  bool
	err    error
	status int // the lookup's answer's; 0 when it did not answer
}

// noteLookupStatus keeps the status of a lookup's answer in the
// lookupReport of ctx, if any.
func noteLookupStatus(ctx context.Context, status int) {
	if report, ok := ctx.Value(lookupReportKey{}).(*lookupReport); ok {
		report.status = status
	}
}

// reportingTo wraps a lookup so that a call made for an admin
// reconciliation leaves its error in the request's lookupReport.
func reportingTo(lookup func(context.Context, store.Record) (idem.Resolution, error)) func(context.Context, store.Record) (idem.Resolution, error) {
	return func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
		res, err := lookup(ctx, rec)
		if report, ok := ctx.Value(lookupReportKey{}).(*lookupReport); ok {
			report.asked, report.err = true, err
		}
		return res, err
	}
}

// detail says what an admin reconciliation did. A lookup's network error
// names its URL, whose query may hold a secret: only the cause is kept.
func (lr *lookupReport) detail(v idem.Verdict, rec store.Record) string {
	switch {
	case v == idem.VerdictCompleted:
		return fmt.Sprintf("the lookup found the request: its response (status %d) is recorded and replayed to every retry", rec.Result.Status)
	case v == idem.VerdictNotExecuted:
		return "the lookup says the request never ran: the key is released and the next retry runs it"
	case !lr.asked && rec.State == store.StateUnknown:
		return "the lookup was not asked: a reconciliation of this key holds its claim, running now (a retry's, the sweep's, " +
			"another gateway's) or ended without a verdict less than --reconcile-timeout + 2 s ago; try again after that"
	case !lr.asked:
		return fmt.Sprintf("the lookup was not asked: the key changed meanwhile (it is %v)", rec.State)
	case lr.err != nil:
		var ue *url.Error
		if errors.As(lr.err, &ue) {
			return "the lookup failed: " + ue.Err.Error() + "; the key stays UNKNOWN"
		}
		return "the lookup failed: " + lr.err.Error() + "; the key stays UNKNOWN"
	}
	return "the lookup's answer could not be recorded (see the gateway's log); the key stays UNKNOWN"
}
