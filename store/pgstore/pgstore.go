package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/recordcodec"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors of this package.
var (
	// ErrConfig is returned by New, Migrate and Store.Reap for an option or
	// argument they cannot use.
	ErrConfig = errors.New("pgstore: bad configuration")
	// ErrDuplicate is returned by Store.Reserve and FencedExec, together
	// with PostgreSQL's unique_violation (23505), when the key is already
	// reserved by a committed (or committing) transaction. The work must
	// not run again; read the recorded outcome with Store.Reservation
	// instead.
	ErrDuplicate = errors.New("pgstore: idempotency key already reserved")
	// ErrStaleFence is returned by Store.Settle and FencedExec when a
	// fenced write matched no row, because a holder with a higher fence
	// wrote it (or it was settled already, or is missing).
	ErrStaleFence = errors.New("pgstore: stale fencing token")
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Schema holds the store's tables and its fence sequence, as created
	// by Migrate. Empty means DefaultSchema ("idem"). Lower-case letters,
	// digits and underscores only.
	Schema string
}

// Store is an idem.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	q      queries
}

// New returns a store on pool, whose tables Migrate has created.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrConfig)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if err := checkSchema(o.Schema); err != nil {
		return nil, err
	}
	return &Store{pool: pool, schema: o.Schema, q: newQueries(o.Schema)}, nil
}

// recordColumns are read by scanRecord, in this order.
const recordColumns = `state::text, owner, fence, fingerprint, acquired_at, completed_at, status, header, body,
	(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint`

// queries holds the SQL of the store, with the schema spliced in.
type queries struct {
	acquire, complete, completedByUs, extend, release, get, del, reap string
	reserve, settle, reservation                                      string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer("S.", schema+".")
	return queries{
		// The INSERT takes the key when it has no row or an expired one,
		// in one atomic step. When a live row holds the key it returns
		// nothing, and Acquire reads that row with the get query: a second
		// round trip, but a read, next to the row lock and commit that the
		// INSERT pays anyway, and a plain INSERT is cheaper than a CTE
		// that also reads the row on every acquisition.
		acquire: r.Replace(`INSERT INTO S.records AS r (tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, expires_at, reap_at)
	VALUES ($1, $2, 'P', $3, nextval('S.fence_seq'), $4, clock_timestamp(), clock_timestamp() + $5 * interval '1 microsecond',
		clock_timestamp() + $5 * interval '1 microsecond')
	ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
		SET state = 'P', owner = excluded.owner, fence = excluded.fence, fingerprint = excluded.fingerprint,
			acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, reap_at = excluded.reap_at,
			completed_at = NULL, status = NULL, header = NULL, body = NULL
		WHERE r.expires_at <= clock_timestamp()
	RETURNING ` + recordColumns),
		// One plain UPDATE: when it matches no row, Complete asks
		// completedByUs whether a retry's first try landed.
		complete: r.Replace(`UPDATE S.records SET state = 'C', completed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5 * interval '1 microsecond', status = $6, header = $7, body = $8
WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'P' AND owner = $3 AND fence = $4
	AND expires_at > clock_timestamp()`),
		completedByUs: r.Replace(`SELECT EXISTS (SELECT 1 FROM S.records
	WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'C' AND owner = $3 AND fence = $4
		AND expires_at > clock_timestamp())`),
		extend: r.Replace(`UPDATE S.records SET expires_at = clock_timestamp() + $5 * interval '1 microsecond'
WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'P' AND owner = $3 AND fence = $4
	AND expires_at > clock_timestamp()`),
		release: r.Replace(`DELETE FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'P' AND owner = $3 AND fence = $4
	AND expires_at > clock_timestamp()`),
		get: r.Replace(`SELECT ` + recordColumns + ` FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND expires_at > clock_timestamp()`),
		del: r.Replace(`WITH gone AS (
	DELETE FROM S.records WHERE tenant_id = $1 AND idempotency_key = $2
	RETURNING expires_at > clock_timestamp() AS live
)
SELECT coalesce(bool_or(live), false) FROM gone`),
		// The reaper takes up to $1 due rows (reap_at passed, see
		// migrations/003_reap_at.sql), deletes those that have expired and
		// moves the others to their end. SKIP LOCKED lets several reapers,
		// and acquisitions taking over an expired row, run at once without
		// waiting for each other. Both branches compare with one instant,
		// the statement's start, so no row is both deleted and moved; a row
		// changed meanwhile is checked again in its latest version.
		reap: r.Replace(`WITH due AS (
	SELECT tenant_id, idempotency_key FROM S.records
	WHERE reap_at <= statement_timestamp()
	ORDER BY reap_at
	LIMIT $1 FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM S.records r USING due
	WHERE r.tenant_id = due.tenant_id AND r.idempotency_key = due.idempotency_key
		AND r.expires_at <= statement_timestamp()
	RETURNING 1
), moved AS (
	UPDATE S.records r SET reap_at = r.expires_at FROM due
	WHERE r.tenant_id = due.tenant_id AND r.idempotency_key = due.idempotency_key
		AND r.expires_at > statement_timestamp()
	RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM moved)`),
		reserve: r.Replace(`INSERT INTO S.reservations (tenant_id, idempotency_key, fence) VALUES ($1, $2, $3)`),
		settle: r.Replace(`UPDATE S.reservations SET fence = $3, outcome = $4, settled_at = clock_timestamp()
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence <= $3 AND settled_at IS NULL`),
		reservation: r.Replace(`SELECT fence, reserved_at, settled_at, outcome FROM S.reservations
WHERE tenant_id = $1 AND idempotency_key = $2`),
	}
}

// acquireTries bounds how often Acquire runs its statement: again when the
// live row that blocked the INSERT was gone before it could be read, or
// after a lost connection.
const acquireTries = 4

// Acquire implements idem.Store.
//
// After a connection error the statement runs again with the same owner: if
// the first try had taken the key, the second finds the row with this
// owner and reports it acquired, so a lost reply never leaves the key held
// by nobody until the lease ends.
func (s *Store) Acquire(ctx context.Context, p idem.AcquireParams) (idem.AcquireResult, error) {
	var err error
	for range acquireTries {
		var (
			res   idem.AcquireResult
			found bool
		)
		res, found, err = s.acquireOnce(ctx, p)
		switch {
		case err == nil && found:
			return res, nil
		case err == nil: // the holder went away between the INSERT and the read: try again
		case ctx.Err() != nil || !isConnectionError(err):
			return idem.AcquireResult{}, fmt.Errorf("pgstore: acquire: %w", err)
		}
	}
	if err == nil {
		err = errors.New("the key changed hands on every try")
	}
	return idem.AcquireResult{}, fmt.Errorf("pgstore: acquire: %w", err)
}

// acquireOnce runs the acquire statement and, when a live row blocked it,
// reads that row. found is false when there was no such row any more.
func (s *Store) acquireOnce(ctx context.Context, p idem.AcquireParams) (res idem.AcquireResult, found bool, err error) {
	rows, err := s.pool.Query(ctx, s.q.acquire, p.Tenant, p.Key, p.Owner, p.Fingerprint, p.LeaseDuration.Microseconds())
	if err != nil {
		return idem.AcquireResult{}, false, err
	}
	defer rows.Close()
	var rec idem.Record
	if rows.Next() {
		if rec, err = scanRecord(p.ID, rows); err != nil {
			return idem.AcquireResult{}, false, err
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return idem.AcquireResult{}, false, err
		}
		return idem.AcquireResult{Acquired: true, Record: rec}, true, nil
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return idem.AcquireResult{}, false, err
	}
	rec, err = s.Get(ctx, p.ID)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return idem.AcquireResult{}, false, nil
	case err != nil:
		return idem.AcquireResult{}, false, err
	}
	// A live PROCESSING row with our owner token is ours: owner tokens are
	// unique per attempt, so an earlier try of this very call took it.
	acquired := rec.State == idem.StateProcessing && rec.Owner == p.Owner
	return idem.AcquireResult{Acquired: acquired, Record: rec}, true, nil
}

// Complete implements idem.Store.
//
// A Complete that finds the key already COMPLETED by the same owner and
// fence is a retry whose first try landed (its reply was lost): it
// succeeds. That check runs only when the update matched no row, so the
// common case is one statement.
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) error {
	tag, err := s.pool.Exec(ctx, s.q.complete, p.Tenant, p.Key, p.Owner, p.Fence, p.Retention.Microseconds(),
		p.Result.Status, recordcodec.AppendHeader(nil, p.Result.Header), nonNil(p.Result.Body))
	if err != nil {
		return fmt.Errorf("pgstore: complete: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var done bool
	if err := s.pool.QueryRow(ctx, s.q.completedByUs, p.Tenant, p.Key, p.Owner, p.Fence).Scan(&done); err != nil {
		return fmt.Errorf("pgstore: complete: %w", err)
	}
	if !done {
		return idem.ErrLeaseLost
	}
	return nil
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, p idem.ExtendParams) error {
	return s.transition(ctx, "extend", s.q.extend, p.Tenant, p.Key, p.Owner, p.Fence, p.LeaseDuration.Microseconds())
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, p idem.LeaseRef) error {
	return s.transition(ctx, "release", s.q.release, p.Tenant, p.Key, p.Owner, p.Fence)
}

func (s *Store) transition(ctx context.Context, op, sql string, args ...any) error {
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if tag.RowsAffected() == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	rows, err := s.pool.Query(ctx, s.q.get, id.Tenant, id.Key)
	if err != nil {
		return idem.Record{}, fmt.Errorf("pgstore: get: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return idem.Record{}, fmt.Errorf("pgstore: get: %w", err)
		}
		return idem.Record{}, idem.ErrNotFound
	}
	rec, err := scanRecord(id, rows)
	if err != nil {
		return idem.Record{}, fmt.Errorf("pgstore: get: %w", err)
	}
	return rec, nil
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, id idem.ID) (bool, error) {
	var live bool
	if err := s.pool.QueryRow(ctx, s.q.del, id.Tenant, id.Key).Scan(&live); err != nil {
		return false, fmt.Errorf("pgstore: delete: %w", err)
	}
	return live, nil
}

// Reap looks at up to batch due records, deletes those that have expired
// and returns how many it looked at. A record is due at the end of the
// lease it was acquired with; one still live then (its lease was extended,
// or it was completed with a retention) is not deleted but moved to its
// real end, so the reaper looks at each record at most once per lease
// extension and once more at its end, however long its retention. A
// record whose end comes before its first lease ends is deleted when that
// lease would have ended; every query treats it as absent from its end on.
//
// Several reapers may run at once: each skips the rows another has
// locked. Call it until it returns less than batch to empty the backlog; a
// bounded batch keeps each transaction short.
func (s *Store) Reap(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("%w: reap batch %d, want > 0", ErrConfig, batch)
	}
	var deleted, moved int
	if err := s.pool.QueryRow(ctx, s.q.reap, batch).Scan(&deleted, &moved); err != nil {
		return 0, fmt.Errorf("pgstore: reap: %w", err)
	}
	return deleted + moved, nil
}

// scanRecord reads recordColumns, after the destinations in pre.
func scanRecord(id idem.ID, rows pgx.Rows, pre ...any) (idem.Record, error) {
	var (
		state     string
		completed *time.Time
		status    *int32
		header    []byte
		body      []byte
		ttlMicros int64
	)
	rec := idem.Record{ID: id}
	dest := append(pre, &state, &rec.Owner, &rec.Fence, &rec.Fingerprint, &rec.AcquiredAt, &completed,
		&status, &header, &body, &ttlMicros)
	if err := rows.Scan(dest...); err != nil {
		return idem.Record{}, err
	}
	rec.TTL = time.Duration(ttlMicros) * time.Microsecond
	switch state {
	case "P":
		rec.State = idem.StateProcessing
	case "C":
		rec.State = idem.StateCompleted
		h, err := recordcodec.ParseHeader(header)
		if err != nil {
			return idem.Record{}, err
		}
		if completed != nil {
			rec.CompletedAt = *completed
		}
		res := &idem.Result{Header: h, Body: body}
		if status != nil {
			res.Status = int(*status)
		}
		rec.Result = res
	default:
		return idem.Record{}, fmt.Errorf("corrupt record: state %q", state)
	}
	return rec, nil
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

var _ idem.Store = (*Store)(nil)
