package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// The actions of the admin API that change a key: each is audited.
const (
	ActionResolve     = "resolve"
	ActionReconcile   = "reconcile"
	ActionDelete      = "delete"
	ActionForceDelete = "force_delete"
)

// The outcomes of an admin change.
const (
	OutcomeCompleted   = "completed"    // resolve, reconcile: the key is COMPLETED with a recorded response
	OutcomeNotExecuted = "not_executed" // resolve, reconcile: the key is released; the next retry runs it
	OutcomeDeleted     = "deleted"      // delete, force_delete: the record is gone
	OutcomeUnchanged   = "unchanged"    // refused (4xx), or a reconcile without a verdict: nothing changed
	OutcomeFailed      = "failed"       // the store failed (5xx): state_after says what is known
	OutcomeForbidden   = "forbidden"    // a read-only token: nothing was tried
)

// auditCapacity is how many admin changes a gateway keeps for GET
// /v1/audit: the last ones, about 2 KiB each at most.
const auditCapacity = 1000

// maxReason bounds the reason an operator gives, in bytes.
const maxReason = 1024

// AuditRecord is one admin change (or an attempt at one), as the log line
// "admin change" and GET /v1/audit give it. It holds no secret: the key
// and tenant as the admin API shows them, the token's name, never the token.
type AuditRecord struct {
	Time        time.Time `json:"time"`
	Actor       string    `json:"actor"`  // the token's name; without tokens loopback-no-token (or insecure-no-token)
	Remote      string    `json:"remote"` // the caller's address, as the admin listener saw it
	Action      string    `json:"action"` // resolve, reconcile, delete or force_delete
	Tenant      string    `json:"tenant"`
	Key         string    `json:"key"`
	Fence       int64     `json:"fence"`        // the record's fence before the change; 0 without a record
	StateBefore string    `json:"state_before"` // PROCESSING, COMPLETED, UNKNOWN, EXPIRED, absent or unreadable
	StateAfter  string    `json:"state_after"`  // read from the store after the change
	Resolution  string    `json:"resolution,omitempty"`
	Reason      string    `json:"reason,omitempty"` // the operator's, as given
	Outcome     string    `json:"outcome"`
	Status      int       `json:"status"`           // the answer's HTTP status
	Code        string    `json:"code,omitempty"`   // the problem's code of a refusal
	Detail      string    `json:"detail,omitempty"` // reconcile: what the lookup did
}

// auditLog keeps the last auditCapacity records of this process and
// counts and logs every one. The log line is the durable record; the
// ring is what the console shows.
type auditLog struct {
	logger  *slog.Logger
	changes *prometheus.CounterVec

	mu   sync.Mutex
	ring []AuditRecord // at most auditCapacity; next is the oldest once full
	next int
}

func newAuditLog(reg prometheus.Registerer, logger *slog.Logger) *auditLog {
	l := &auditLog{logger: logger, changes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_admin_changes_total",
		Help: "Changes asked of the admin API (resolve, reconcile, delete, force_delete) by outcome: completed, not_executed, deleted, unchanged, failed, forbidden.",
	}, []string{"action", "outcome"})}
	reg.MustRegister(l.changes)
	for _, action := range []string{ActionResolve, ActionReconcile, ActionDelete, ActionForceDelete} {
		outcomes := []string{OutcomeUnchanged, OutcomeFailed, OutcomeForbidden, OutcomeDeleted}
		if action == ActionResolve || action == ActionReconcile {
			outcomes[3] = OutcomeCompleted
			outcomes = append(outcomes, OutcomeNotExecuted)
		}
		for _, o := range outcomes {
			l.changes.WithLabelValues(action, o)
		}
	}
	return l
}

// add logs, counts and keeps rec. The line is written whatever
// --log-level says: it is the audit trail, not a verbosity.
func (l *auditLog) add(ctx context.Context, rec AuditRecord) {
	l.changes.WithLabelValues(rec.Action, rec.Outcome).Inc()
	line := slog.NewRecord(rec.Time, slog.LevelInfo, "admin change", 0)
	line.AddAttrs(slog.String("actor", rec.Actor), slog.String("remote", rec.Remote), slog.String("action", rec.Action),
		slog.String("tenant", rec.Tenant), slog.String("key", rec.Key), slog.Int64("fence", rec.Fence),
		slog.String("state_before", rec.StateBefore), slog.String("state_after", rec.StateAfter),
		slog.String("resolution", rec.Resolution), slog.String("reason", rec.Reason), slog.String("outcome", rec.Outcome),
		slog.Int("status", rec.Status), slog.String("code", rec.Code), slog.String("detail", rec.Detail))
	l.logger.Handler().Handle(ctx, line)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < auditCapacity {
		l.ring = append(l.ring, rec)
		return
	}
	l.ring[l.next] = rec
	l.next = (l.next + 1) % auditCapacity
}

// find returns the kept records that match, newest first.
func (l *auditLog) find(match func(AuditRecord) bool) []AuditRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []AuditRecord{}
	for i := range l.ring {
		rec := l.ring[(l.next+len(l.ring)-1-i)%len(l.ring)]
		if match(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// AuditPage is the answer of GET /v1/audit.
type AuditPage struct {
	Records []AuditRecord `json:"records"` // newest first
}

// serveAudit answers GET /v1/audit[?tenant=T][&key=K]: this process's
// last admin changes, of one tenant and key when asked.
func (g *Gateway) serveAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tenant, key := ParseTenant(q.Get("tenant")), q.Get("key")
	byTenant, byKey := q.Has("tenant"), q.Has("key")
	writeJSON(w, AuditPage{Records: g.audit.find(func(rec AuditRecord) bool {
		return (!byTenant || rec.Tenant == tenant) && (!byKey || rec.Key == key)
	})})
}

// change serves an admin change of the key in r's path: only a
// read-write token may make it, and every attempt, refused or not, is
// audited with the key's state before and after. serve fills in what it
// knows (the reason, the resolution, the outcome of a success).
func (g *Gateway) change(action func(*http.Request) string, serve func(http.ResponseWriter, *http.Request, *AuditRecord)) http.Handler {
	return g.authorize(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, id := actorOf(r), pathID(r)
		rec := &AuditRecord{Time: time.Now().UTC(), Actor: who.name, Remote: r.RemoteAddr, Action: action(r),
			Tenant: clipped(id.Tenant), Key: clipped(id.Key)}
		// The store reads before and after run even when the caller has
		// gone: the record must say what happened.
		ctx := context.WithoutCancel(r.Context())
		rec.Fence, rec.StateBefore = g.stateOf(ctx, id)
		aw := &answerWriter{ResponseWriter: w}
		if who.role != RoleReadWrite {
			idemhttp.WriteProblem(aw, http.StatusForbidden, CodeAdminForbidden, fmt.Sprintf(
				"the token %q is %s: it cannot %s; nothing was changed", who.name, who.role, rec.Action))
			rec.Outcome = OutcomeForbidden
		} else {
			serve(aw, r, rec)
		}
		_, rec.StateAfter = g.stateOf(ctx, id)
		rec.Status = aw.status
		switch {
		case rec.Outcome != "":
		case aw.status >= 500:
			rec.Outcome = OutcomeFailed
		default:
			rec.Outcome = OutcomeUnchanged
		}
		if aw.status >= 400 {
			var p struct{ Code string }
			json.Unmarshal(aw.problem, &p)
			rec.Code = p.Code
		}
		g.audit.add(ctx, *rec)
	}))
}

// clipped is a path's tenant or key as the audit keeps it: whole when
// it can be one (at most store.MaxKeyLength bytes), else cut there and
// marked. The path is the caller's, checked only after the audit record
// is made: a caller with any token (a read-only one, refused) could
// otherwise fill the ring and the log with a megabyte of path per line.
func clipped(s string) string {
	if len(s) <= store.MaxKeyLength {
		return s
	}
	return strings.ToValidUTF8(s[:store.MaxKeyLength], "") + fmt.Sprintf("... (%d bytes)", len(s))
}

// named is the action of a route that has one.
func named(action string) func(*http.Request) string {
	return func(*http.Request) string { return action }
}

// deleteAction is a DELETE's action: force_delete with ?force=true.
func deleteAction(r *http.Request) string {
	if force, _ := forceParam(r); force {
		return ActionForceDelete
	}
	return ActionDelete
}

// stateOf reads a key's fence and state for the audit.
func (g *Gateway) stateOf(ctx context.Context, id store.ID) (int64, string) {
	rec, err := g.engine.Get(ctx, id)
	switch {
	case err == nil:
		return rec.Fence, rec.State.String()
	case errors.Is(err, idem.ErrNotFound):
		return 0, "absent"
	}
	return 0, "unreadable"
}

// answerWriter keeps the status of an answer, and the start of its body
// when it is a problem, for the audit.
type answerWriter struct {
	http.ResponseWriter
	status  int
	problem []byte
}

func (w *answerWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && len(w.problem) < 4096 {
		w.problem = append(w.problem, b[:min(len(b), 4096-len(w.problem))]...)
	}
	return w.ResponseWriter.Write(b)
}

// readReason reads the optional body of a DELETE or a reconcile:
// nothing, or {"reason": "..."}.
func readReason(w http.ResponseWriter, r *http.Request) (string, error) {
	var note struct {
		Reason string `json:"reason"`
	}
	if err := decodeJSON(w, r, 16<<10, &note, true); err != nil {
		return "", err
	}
	if err := checkReason(note.Reason); err != nil {
		return "", err
	}
	return note.Reason, nil
}

// checkReason bounds an operator's reason.
func checkReason(reason string) error {
	if len(reason) > maxReason {
		return fmt.Errorf("reason is %d bytes: at most %d", len(reason), maxReason)
	}
	return nil
}
