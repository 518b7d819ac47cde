package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/recordcodec"
)

// row is one row of recordColumns.
type row struct {
	rec       store.Record
	abandoned bool            // PROCESSING with its lease ended: rec says UNKNOWN
	takeover  *store.Takeover // set by the acquisition that took the row over
}

// scanRow reads recordColumns, then the destinations in post.
func scanRow(id store.ID, rows pgx.Rows, post ...any) (row, error) {
	var (
		state                   string
		completed, takenAt      *time.Time
		status                  *int32
		takenFence              *int64
		reason                  *string
		header, body            []byte
		leaseEnd                time.Time
		leaseMicros, lifeMicro  int64
		keyMicros               int64 // the rest of a tombstone's life (key_until)
		retMicros, keyRetMicros int64 // P and U: the attempt's retentions
	)
	rec := store.Record{ID: id}
	dest := append([]any{&state, &rec.Owner, &rec.Fence, &rec.Fingerprint, &rec.AcquiredAt, &completed,
		&status, &header, &body, &reason, &leaseEnd, &leaseMicros, &lifeMicro, &takenFence, &takenAt, &keyMicros, &rec.Label, &retMicros, &keyRetMicros}, post...)
	if err := rows.Scan(dest...); err != nil {
		return row{}, err
	}
	r := row{}
	if completed != nil {
		rec.CompletedAt = *completed
	}
	if reason != nil {
		rec.Reason = *reason
	}
	rec.TTL = time.Duration(lifeMicro) * time.Microsecond
	if state == "P" || state == "U" {
		rec.Retention, rec.KeyRetention = time.Duration(retMicros)*time.Microsecond, time.Duration(keyRetMicros)*time.Microsecond
	}
	switch state {
	case "P":
		rec.State = store.StateProcessing
		rec.TTL = time.Duration(leaseMicros) * time.Microsecond
		if leaseMicros <= 0 {
			// Reported as the next Acquire without TakeOver will make it.
			r.abandoned = true
			rec.State, rec.Reason, rec.CompletedAt = store.StateUnknown, store.ReasonAbandoned, leaseEnd
			rec.TTL = 0 // kept until settled
		}
		if takenFence != nil && takenAt != nil {
			r.takeover = &store.Takeover{Fence: *takenFence, AcquiredAt: *takenAt}
		}
	case "U":
		rec.State, rec.TTL = store.StateUnknown, 0 // kept until settled
	case "C":
		if lifeMicro <= 0 { // read only while key_until is ahead: a tombstone
			rec.State, rec.TTL, rec.Owner, rec.Label = store.StateExpired, time.Duration(keyMicros)*time.Microsecond, "", ""
			rec.Result = &store.Result{}
			if status != nil {
				rec.Result.Status = int(*status)
			}
			break
		}
		rec.State = store.StateCompleted
		h, err := recordcodec.ParseHeader(header)
		if err != nil {
			return row{}, err
		}
		res := &store.Result{Header: h, Body: body}
		if status != nil {
			res.Status = int(*status)
		}
		rec.Result = res
	default:
		return row{}, fmt.Errorf("corrupt record: state %q", state)
	}
	r.rec = rec
	return r, nil
}

// isConnectionError reports an error of the connection rather than one the
// server returned for the statement: the statement may or may not have run.
func isConnectionError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// admin_shutdown and friends: the server terminated the backend.
		return strings.HasPrefix(pgErr.Code, "57P")
	}
	return true
}

// nonNil stores an empty body as an empty bytea, not NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
