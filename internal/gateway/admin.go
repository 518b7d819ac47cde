package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
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

// readyKey is the key /readyz looks up: a round trip to the store.
var readyKey = store.ID{Tenant: "idem", Key: "readyz"}

// adminHandler serves health, readiness, metrics and the key API.
// A resolution's recorded body is at most maxResponse bytes, as is every
// response the gateway records.
func adminHandler(e *idem.Engine, reg *prometheus.Registry, token string, maxResponse int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := e.Get(r.Context(), readyKey); err != nil && !errors.Is(err, idem.ErrNotFound) {
			idemhttp.WriteProblem(w, http.StatusServiceUnavailable, idemhttp.CodeStoreUnavailable, err.Error())
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	keys := http.NewServeMux()
	keys.HandleFunc("GET /v1/keys/{tenant}/{key}", func(w http.ResponseWriter, r *http.Request) {
		rec, err := e.Get(r.Context(), pathID(r))
		if err != nil {
			keyError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(ViewRecord(rec))
	})
	keys.HandleFunc("DELETE /v1/keys/{tenant}/{key}", func(w http.ResponseWriter, r *http.Request) {
		force, err := forceParam(r)
		if err != nil {
			idemhttp.WriteProblem(w, http.StatusBadRequest, CodeDeleteInvalid, err.Error())
			return
		}
		del := e.Delete
		if force {
			del = e.ForceDelete
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
		w.WriteHeader(http.StatusNoContent)
	})
	registerUnknownAPI(keys, e, maxResponse)
	mux.Handle("/v1/", requireToken(token, keys))
	return mux
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

// requireToken lets a request through only with "Authorization: Bearer
// token"; an empty token lets everything through.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
			idemhttp.WriteProblem(w, http.StatusUnauthorized, CodeAdminUnauthorized, "the admin API needs the bearer token set by --admin-token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RecordView is the JSON form of a record in the admin API. The owner token
// is left out: it is the capability to complete the key.
type RecordView struct {
	Tenant      string      `json:"tenant"`
	Key         string      `json:"key"`
	State       string      `json:"state"`
	Fence       int64       `json:"fence"`
	Fingerprint string      `json:"fingerprint"`
	AcquiredAt  time.Time   `json:"acquired_at"`
	CompletedAt *time.Time  `json:"completed_at,omitempty"`
	TTLMillis   int64       `json:"ttl_ms"`
	Reason      string      `json:"reason,omitempty"` // UNKNOWN: why
	Status      int         `json:"status,omitempty"`
	Header      http.Header `json:"header,omitempty"`
	BodyBytes   int         `json:"body_bytes,omitempty"`
}

// ViewRecord returns the admin view of a record.
func ViewRecord(rec store.Record) RecordView {
	v := RecordView{Tenant: rec.Tenant, Key: rec.Key, State: rec.State.String(), Fence: rec.Fence,
		Fingerprint: rec.Fingerprint, AcquiredAt: rec.AcquiredAt.UTC(), TTLMillis: rec.TTL.Milliseconds(), Reason: rec.Reason}
	if !rec.CompletedAt.IsZero() { // COMPLETED: when completed; UNKNOWN: when marked
		t := rec.CompletedAt.UTC()
		v.CompletedAt = &t
	}
	if rec.Result != nil {
		v.Status, v.Header, v.BodyBytes = rec.Result.Status, rec.Result.Header, len(rec.Result.Body)
	}
	return v
}
