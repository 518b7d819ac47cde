package gateway

import (
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store"
)

// EmptyTenant stands for the empty tenant in admin paths, whose segments
// cannot be empty. It is what requests without credentials are scoped to.
// See ParseTenant for the tenants made of dashes.
const EmptyTenant = "-"

// ParseTenant returns the tenant that a path segment of the admin API (or
// its tenant parameter, or a TENANT argument of idem keys) names: a run of
// n dashes names the tenant of n-1 dashes, so "-" is the empty tenant and
// "--" the tenant "-"; any other value names itself. Every tenant has a
// segment this way (the other awkward ones, such as "/", "." or "..", are
// percent-encoded as usual: %2F, %2E).
func ParseTenant(segment string) string {
	if segment != "" && strings.Trim(segment, "-") == "" {
		return segment[1:]
	}
	return segment
}

// TenantSegment is ParseTenant's inverse: the segment (or TENANT
// argument) that names tenant.
func TenantSegment(tenant string) string {
	if strings.Trim(tenant, "-") == "" {
		return tenant + "-"
	}
	return tenant
}

// adminOpenAPI is the OpenAPI document of the admin API, served at
// GET /v1/openapi.json; TestAdminOpenAPI holds it to adminHandler.
//
//go:embed admin-openapi.json
var adminOpenAPI []byte

// adminHandler serves the admin API: health, readiness and metrics to
// anyone who reaches it (probes and scrapers name the address as they
// please); the console's files, and the API under /v1/ behind the token,
// only by an allowed Host (adminguard.go); the API only to a request
// that no page of another site could have made. Every answer gets
// nosniff: none of them is a page but the console's own. A resolution's
// recorded body is at most cfg.MaxResponse bytes, as is every response
// the gateway records.
func (g *Gateway) adminHandler() http.Handler {
	e := g.engine
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := g.ready(r.Context()); errors.Is(err, errDraining) {
			idemhttp.WriteProblem(w, http.StatusServiceUnavailable, CodeDraining, err.Error())
			return
		} else if err != nil {
			idemhttp.WriteProblem(w, http.StatusServiceUnavailable, idemhttp.CodeStoreUnavailable, err.Error())
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	mux.Handle(console.Path, g.guardHost(console.Handler()))

	api := http.NewServeMux()
	read := func(pattern string, serve http.HandlerFunc) { api.Handle(pattern, g.authorize(serve)) }
	read("GET /v1/keys/{tenant}/{key}", func(w http.ResponseWriter, r *http.Request) {
		rec, err := e.Get(r.Context(), pathID(r))
		if err != nil {
			keyError(w, err)
			return
		}
		writeJSON(w, ViewRecord(rec))
	})
	read("GET /v1/keys", g.serveList)
	read("GET /v1/stats", g.serveStats)
	read("GET /v1/keys/{tenant}/{key}/result", g.serveResult)
	read("GET /v1/audit", g.serveAudit)
	read("GET /v1/config", g.serveConfig)
	api.Handle("DELETE /v1/keys/{tenant}/{key}", g.change(deleteAction, g.serveDelete))
	api.Handle("POST /v1/keys/{tenant}/{key}/resolve", g.change(named(ActionResolve), g.serveResolve))
	api.Handle("POST /v1/keys/{tenant}/{key}/reconcile", g.change(named(ActionReconcile), g.serveReconcile))
	// The document needs no token: it is the same for every gateway of
	// this version and tells nothing of this one's settings or keys, and
	// a client generator or an API browser reads it before it has one.
	// It keeps the Host and Origin checks of every /v1/ answer.
	api.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(adminOpenAPI)
	})
	routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := api.Handler(r); pattern == "" {
			// No route: the mux would answer in text/plain; after the
			// token, as every /v1/ answer but the document's.
			g.authorize(noRoute(api)).ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
	mux.Handle("/v1/", g.guardHost(g.guardBrowser(routes)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	})
}

// The codes of an admin call that no route takes.
const (
	CodeAdminNoRoute       = "admin_no_route"           // 404 (admin API): no route has this path
	CodeAdminMethodRefused = "admin_method_not_allowed" // 405 (admin API): the path's routes take other methods, which Allow names
)

// noRoute answers a call that no route of api takes as the mux would
// (404, or 405 with Allow), as a problem.
func noRoute(api *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, _ := api.Handler(r)
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header()["Allow"] = probe.header["Allow"]
			idemhttp.WriteProblem(w, http.StatusMethodNotAllowed, CodeAdminMethodRefused, fmt.Sprintf(
				"this path takes %s, not %s: the routes are in GET /v1/openapi.json", probe.header.Get("Allow"), r.Method))
			return
		}
		idemhttp.WriteProblem(w, http.StatusNotFound, CodeAdminNoRoute, "no route of the admin API has this path: the routes are in GET /v1/openapi.json")
	})
}

// statusProbe keeps the status and header the mux's own answer would
// have, and drops its text.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }

// serveConfig answers GET /v1/config: the effective configuration
// (Config.EffectiveConfig) that runs, given at start or by the last
// successful reload.
func (g *Gateway) serveConfig(w http.ResponseWriter, r *http.Request) {
	doc := g.current.Load().cfg.EffectiveConfig
	if doc == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(doc)
}

// serveDelete answers DELETE /v1/keys/{tenant}/{key}[?force=true], whose
// body is nothing or {"reason": "..."}.
func (g *Gateway) serveDelete(w http.ResponseWriter, r *http.Request, audit *AuditRecord) {
	force, err := forceParam(r)
	if err == nil {
		audit.Reason, err = readReason(w, r)
	}
	if err != nil {
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeDeleteInvalid, err.Error())
		return
	}
	del := g.engine.Delete
	if force {
		del = g.engine.ForceDelete
	}
	existed, err := del(r.Context(), pathID(r))
	if err != nil {
		keyError(w, err)
		return
	}
	if !existed {
		idemhttp.WriteProblem(w, http.StatusNotFound, CodeKeyNotFound, "no record for this tenant and key")
		return
	}
	audit.Outcome = OutcomeDeleted
	w.WriteHeader(http.StatusNoContent)
}

func pathID(r *http.Request) store.ID {
	return store.ID{Tenant: ParseTenant(r.PathValue("tenant")), Key: r.PathValue("key")}
}

// forceParam reads DELETE's ?force=true.
func forceParam(r *http.Request) (bool, error) {
	v := r.URL.Query()["force"]
	switch {
	case len(v) == 0:
		return false, nil
	case len(v) == 1 && (v[0] == "true" || v[0] == "false"):
		return v[0] == "true", nil
	}
	return false, errors.New("force must be true or false, once")
}

func keyError(w http.ResponseWriter, err error) {
	var inFlight *idem.InFlightError
	switch {
	case errors.As(err, &inFlight):
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, inFlight.RetryAfter.Round(time.Second)/time.Second))))
		idemhttp.WriteProblem(w, http.StatusConflict, idemhttp.CodeKeyInFlight, "the key's request is running (PROCESSING): "+
			"deleting it would let a retry run it a second time. Wait until it finishes, or DELETE with ?force=true")
	case errors.Is(err, idem.ErrOutcomeUnknown):
		idemhttp.WriteProblem(w, http.StatusConflict, CodeKeyUnknown, "the key's request may have taken effect (UNKNOWN): "+
			"deleting it would let a retry run it again. Settle it with POST .../resolve (completed, or not_executed), or DELETE with ?force=true")
	case errors.Is(err, idem.ErrNotFound):
		idemhttp.WriteProblem(w, http.StatusNotFound, CodeKeyNotFound, "no record for this tenant and key")
	case errors.Is(err, idem.ErrInvalidKey):
		idemhttp.WriteProblem(w, http.StatusBadRequest, idemhttp.CodeKeyInvalid, err.Error())
	case errors.Is(err, idem.ErrInvalidTenant):
		idemhttp.WriteProblem(w, http.StatusBadRequest, idemhttp.CodeTenantInvalid, err.Error())
	case errors.Is(err, idem.ErrInvalidCursor):
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeCursorInvalid, "after= is not the next of a page of this listing (of this tenant, or of all); start again without it")
	default:
		idemhttp.WriteProblem(w, http.StatusServiceUnavailable, idemhttp.CodeStoreUnavailable, err.Error())
	}
}

// RecordView is the JSON form of a record in the admin API. The owner token
// is left out: it is the capability to complete the key.
type RecordView struct {
	Tenant      string `json:"tenant"`
	Key         string `json:"key"`
	State       string `json:"state"`
	Fence       int64  `json:"fence"`
	Fingerprint string `json:"fingerprint"`
	// Label is what the request was (store.Record.Label): "POST
	// /v1/orders/42 route=orders"; AcquiredAt is when it was sent on.
	Label       string     `json:"label,omitempty"`
	AcquiredAt  time.Time  `json:"acquired_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// TTLMillis is how long the record still lives (store.Record.TTL):
	// the lease left of a PROCESSING record, the retention left of a
	// COMPLETED one. An UNKNOWN record has no end in time: 0, and
	// UntilSettled says it is kept until settled.
	TTLMillis    int64       `json:"ttl_ms"`
	UntilSettled bool        `json:"until_settled,omitempty"`
	Reason       string      `json:"reason,omitempty"` // UNKNOWN: why
	Status       int         `json:"status,omitempty"`
	Header       http.Header `json:"header,omitempty"`
	BodyBytes    int         `json:"body_bytes,omitempty"`
}

// ViewRecord returns the admin view of a record.
func ViewRecord(rec store.Record) RecordView {
	v := RecordView{Tenant: rec.Tenant, Key: rec.Key, State: rec.State.String(), Fence: rec.Fence,
		Fingerprint: rec.Fingerprint, Label: rec.Label, AcquiredAt: rec.AcquiredAt.UTC(), TTLMillis: rec.TTL.Milliseconds(), Reason: rec.Reason}
	if rec.State == store.StateUnknown {
		v.TTLMillis, v.UntilSettled = 0, true
	}
	if !rec.CompletedAt.IsZero() { // COMPLETED: when completed; UNKNOWN: when marked
		t := rec.CompletedAt.UTC()
		v.CompletedAt = &t
	}
	if rec.Result != nil {
		v.Status, v.Header, v.BodyBytes = rec.Result.Status, rec.Result.Header, len(rec.Result.Body)
	}
	return v
}
