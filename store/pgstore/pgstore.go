package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/recordcodec"
	"github.com/jackc/pgx/v5/pgconn"
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

// recordColumns are read by scanRecord, in this order. The lease ends at
// lease_until, or at expires_at in a row an older version wrote
// (migrations/004_unknown.sql).
const recordColumns = `state::text, owner, fence, fingerprint, acquired_at, completed_at, status, header, body, reason,
	coalesce(lease_until, expires_at),
	(extract(epoch FROM coalesce(lease_until, expires_at) - clock_timestamp()) * 1000000)::bigint,
	(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint,
	taken_fence, taken_acquired_at`

// leaseEnded is true for a row whose lease has ended (by the database's clock).
const leaseEnded = `coalesce(lease_until, expires_at) <= clock_timestamp()`

// unknownNow matches a live row that is UNKNOWN, or PROCESSING with its
// lease ended (abandoned: Get reports it UNKNOWN).
const unknownNow = `expires_at > clock_timestamp() AND (state = 'U' OR (state = 'P' AND ` + leaseEnded + `))`

// queries holds the SQL of the store, with the schema spliced in.
type queries struct {
	acquire, abandon, complete, completedByUs, extend, release, markUnknown string
	claim, resolveCompleted, resolveDeleted, listTenant, listAll            string
	get, del, reap                                                          string
	reserve, settle, reservation                                            string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer("S.", schema+".")
	return queries{
		// The INSERT takes the key when it has no row or an expired one, or
		// ($7) takes over a row whose lease ended, in one atomic step. When
		// a live row holds the key it returns nothing, and Acquire reads
		// that row with the get query: a second round trip, but a read,
		// next to the row lock and commit that the INSERT pays anyway, and
		// a plain INSERT is cheaper than a CTE that also reads the row on
		// every acquisition. The row lives the lease ($5) plus the
		// retention: $6 is their sum. One reading of the clock sets the
		// acquisition time, the deadlines and the fence's floor
		// (migrations/005_fence_clock.sql); the fence is above the row's
		// even if someone set the sequence back.
		acquire: r.Replace(`INSERT INTO S.records AS r (tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at,
		lease_until, expires_at, reap_at)
	SELECT $1, $2, 'P', $3, S.next_fence('S.fence_seq', c.now), $4, c.now, c.now + $5 * interval '1 microsecond',
		c.now + $6 * interval '1 microsecond', c.now + $6 * interval '1 microsecond'
	FROM (SELECT clock_timestamp() AS now) c
	ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
		SET state = 'P', owner = excluded.owner, fence = greatest(excluded.fence, r.fence + 1), fingerprint = excluded.fingerprint,
			acquired_at = excluded.acquired_at, lease_until = excluded.lease_until, expires_at = excluded.expires_at,
			reap_at = excluded.reap_at, completed_at = NULL, status = NULL, header = NULL, body = NULL,
			reason = NULL, claim_owner = NULL, claim_until = NULL,
			-- A live row is taken over; an expired one was absent.
			taken_fence = CASE WHEN r.expires_at > clock_timestamp() THEN r.fence END,
			taken_acquired_at = CASE WHEN r.expires_at > clock_timestamp() THEN r.acquired_at END
		WHERE r.expires_at <= clock_timestamp() OR ($7 AND r.state = 'P' AND coalesce(r.lease_until, r.expires_at) <= clock_timestamp())
	RETURNING ` + recordColumns),
		// An Acquire without TakeOver that found the abandoned row of fence
		// $3 turns it UNKNOWN for the retention ($5), unless it changed.
		abandon: r.Replace(`UPDATE S.records SET state = 'U', reason = $4, completed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5 * interval '1 microsecond'
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND state = 'P' AND ` + leaseEnded + `
	AND expires_at > clock_timestamp()
RETURNING ` + recordColumns),
		// One plain UPDATE: when it matches no row, Complete asks
		// completedByUs whether a retry's first try landed. The lease's end
		// is not checked: a late completion of a row still the caller's,
		// PROCESSING or UNKNOWN, is the truth. reason and the claim are NULL
		// already on a P row, so that Complete changes no indexed value.
		complete: r.Replace(`UPDATE S.records SET state = 'C', completed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5 * interval '1 microsecond', status = $6, header = $7, body = $8,
	reason = NULL, claim_owner = NULL, claim_until = NULL
WHERE tenant_id = $1 AND idempotency_key = $2 AND state IN ('P', 'U') AND owner = $3 AND fence = $4
	AND expires_at > clock_timestamp()`),
		completedByUs: r.Replace(`SELECT EXISTS (SELECT 1 FROM S.records
	WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'C' AND owner = $3 AND fence = $4
		AND expires_at > clock_timestamp())`),
		// Extend never revives an ended lease. $6: the lease plus the retention.
		extend: r.Replace(`UPDATE S.records SET lease_until = clock_timestamp() + $5 * interval '1 microsecond',
	expires_at = clock_timestamp() + $6 * interval '1 microsecond'
WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'P' AND owner = $3 AND fence = $4
	AND coalesce(lease_until, expires_at) > clock_timestamp()`),
		// Release deletes the caller's row: PROCESSING, or UNKNOWN for
		// reason $5 (abandoned: its lease ended, nobody said anything about
		// the work) while no reconciliation claim holds it.
		release: r.Replace(`DELETE FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND owner = $3 AND fence = $4
	AND (state = 'P' OR (state = 'U' AND reason = $5 AND (claim_until IS NULL OR claim_until <= clock_timestamp())))
	AND expires_at > clock_timestamp()`),
		// A repeated MarkUnknown keeps the first reason, time and end.
		markUnknown: r.Replace(`UPDATE S.records SET state = 'U', reason = coalesce(reason, $5),
	completed_at = CASE WHEN state = 'U' THEN completed_at ELSE clock_timestamp() END,
	expires_at = CASE WHEN state = 'U' THEN expires_at ELSE clock_timestamp() + $6 * interval '1 microsecond' END
WHERE tenant_id = $1 AND idempotency_key = $2 AND state IN ('P', 'U') AND owner = $3 AND fence = $4
	AND expires_at > clock_timestamp()`),
		// Claim decides on the row it returns, in one statement: cur locks
		// the live row (its newest version) and says whether it is free to
		// claim; won takes the claim on it, turning an abandoned row UNKNOWN
		// (keeping its end). The answer is won's row, or cur's, with the
		// decision in the last column.
		claim: r.Replace(`WITH cur AS (
	SELECT ` + recordColumns + `, ` + unknownNow + ` AND (claim_until IS NULL OR claim_until <= clock_timestamp()) AS free
	FROM S.records WHERE tenant_id = $1 AND idempotency_key = $2 AND expires_at > clock_timestamp() FOR UPDATE
), won AS (
	UPDATE S.records SET state = 'U', reason = coalesce(reason, $5),
		completed_at = coalesce(completed_at, clock_timestamp()),
		claim_owner = $3, claim_until = clock_timestamp() + $4 * interval '1 microsecond'
	WHERE tenant_id = $1 AND idempotency_key = $2 AND (SELECT free FROM cur)
	RETURNING ` + recordColumns + `, true
)
SELECT * FROM won UNION ALL SELECT * FROM cur WHERE NOT free`),
		// Resolve: $3 the fence, $4 the claim's owner or '' (an operator).
		resolveCompleted: r.Replace(`UPDATE S.records SET state = 'C', completed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5 * interval '1 microsecond', status = $6, header = $7, body = $8,
	reason = NULL, claim_owner = NULL, claim_until = NULL
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND ` + unknownNow + `
	AND ($4 = '' OR (claim_owner = $4 AND claim_until > clock_timestamp()))`),
		resolveDeleted: r.Replace(`DELETE FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND ` + unknownNow + `
	AND ($4 = '' OR (claim_owner = $4 AND claim_until > clock_timestamp()))`),
		// The listings walk the partial index records_unknown (keyset
		// pagination); reason IS NOT NULL is its predicate.
		listTenant: r.Replace(`SELECT ` + recordColumns + `, tenant_id, idempotency_key FROM S.records
WHERE reason IS NOT NULL AND state = 'U' AND expires_at > clock_timestamp() AND tenant_id = $1 AND idempotency_key > $2
ORDER BY idempotency_key LIMIT $3`),
		listAll: r.Replace(`SELECT ` + recordColumns + `, tenant_id, idempotency_key FROM S.records
WHERE reason IS NOT NULL AND state = 'U' AND expires_at > clock_timestamp() AND (tenant_id, idempotency_key) > ($1, $2)
ORDER BY tenant_id, idempotency_key LIMIT $3`),
		get: r.Replace(`SELECT ` + recordColumns + ` FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND expires_at > clock_timestamp()`),
		del: r.Replace(`WITH gone AS (
	DELETE FROM S.records WHERE tenant_id = $1 AND idempotency_key = $2 AND ($3::bigint = 0 OR fence = $3)
	RETURNING expires_at > clock_timestamp() AS live
)
SELECT coalesce(bool_or(live), false) FROM gone`),
		reap:    r.Replace(reapSQL),
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
	for try := range acquireTries {
		var (
			res   idem.AcquireResult
			found bool
		)
		if try > 0 && err != nil && p.TakeOver {
			// The lost try may have taken the key, and its lease may have
			// ended since: the statement would take over this very call's
			// row. Look for it first.
			if res, found, err = s.own(ctx, p); err == nil && found {
				return res, nil
			}
		}
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
// reads that row; it turns an abandoned row UNKNOWN when p.TakeOver is
// false. found is false when the row changed under it: try again.
func (s *Store) acquireOnce(ctx context.Context, p idem.AcquireParams) (res idem.AcquireResult, found bool, err error) {
	r, ok, err := s.queryRow(ctx, s.q.acquire, p.Tenant, p.Key, p.Owner, p.Fingerprint, p.LeaseDuration.Microseconds(),
		(p.LeaseDuration + p.Retention).Microseconds(), p.TakeOver)
	switch {
	case err != nil:
		return idem.AcquireResult{}, false, err
	case ok:
		return idem.AcquireResult{Acquired: true, Record: r.rec, Takeover: r.takeover}, true, nil
	}
	r, ok, err = s.queryRow(ctx, s.q.get, p.Tenant, p.Key)
	switch {
	case err != nil || !ok:
		return idem.AcquireResult{}, false, err
	case r.owned(p.Owner):
		// A PROCESSING row with our owner token is ours: owner tokens are
		// unique per attempt, so an earlier try of this very call took it,
		// and its reply was lost. Its lease may have ended meanwhile:
		// still ours, not an abandoned attempt (nothing ran under it); the
		// engine's deadline, counted from before the first try, has ended
		// with it.
		return r.acquired(), true, nil
	case r.abandoned && p.TakeOver: // the lease ended after the INSERT looked: it takes over now
		return idem.AcquireResult{}, false, nil
	case r.abandoned:
		// A third statement, only for a key whose owner crashed or stalled.
		r, ok, err = s.queryRow(ctx, s.q.abandon, p.Tenant, p.Key, r.rec.Fence, idem.ReasonAbandoned, p.Retention.Microseconds())
		return idem.AcquireResult{Record: r.rec}, ok, err
	}
	return idem.AcquireResult{Record: r.rec}, true, nil
}

// own reads the key's row and reports it acquired when it is this call's
// own PROCESSING row (its lease ended or not).
func (s *Store) own(ctx context.Context, p idem.AcquireParams) (idem.AcquireResult, bool, error) {
	r, ok, err := s.queryRow(ctx, s.q.get, p.Tenant, p.Key)
	if err != nil || !ok || !r.owned(p.Owner) {
		return idem.AcquireResult{}, false, err
	}
	return r.acquired(), true, nil
}

// owned reports whether r is a PROCESSING row (its lease ended or not) of
// owner.
func (r row) owned(owner string) bool {
	return r.rec.Owner == owner && (r.rec.State == idem.StateProcessing || r.abandoned)
}

// acquired is the answer to the acquisition of r by its owner.
func (r row) acquired() idem.AcquireResult {
	rec := r.rec
	rec.State, rec.Reason = idem.StateProcessing, ""
	return idem.AcquireResult{Acquired: true, Record: rec, Takeover: r.takeover}
}

// queryRow runs sql, which returns recordColumns of at most one row, and
// scans that row; ok is false when there was none.
func (s *Store) queryRow(ctx context.Context, sql string, args ...any) (r row, ok bool, err error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return row{}, false, err
	}
	defer rows.Close()
	if rows.Next() {
		r, err = scanRow(idem.ID{Tenant: args[0].(string), Key: args[1].(string)}, rows)
		ok = err == nil
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return row{}, false, err
	}
	return r, ok, nil
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
	return s.transition(ctx, "extend", s.q.extend, p.Tenant, p.Key, p.Owner, p.Fence, p.LeaseDuration.Microseconds(),
		(p.LeaseDuration + p.Retention).Microseconds())
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, p idem.LeaseRef) error {
	return s.transition(ctx, "release", s.q.release, p.Tenant, p.Key, p.Owner, p.Fence, idem.ReasonAbandoned)
}

// MarkUnknown implements idem.Store.
func (s *Store) MarkUnknown(ctx context.Context, p idem.MarkUnknownParams) error {
	return s.transition(ctx, "mark unknown", s.q.markUnknown, p.Tenant, p.Key, p.Owner, p.Fence, p.Reason, p.Retention.Microseconds())
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

// Claim implements idem.Store. One statement decides and returns the row
// it decided on: a second read could see a row changed since (marked
// UNKNOWN by its owner, say) and report it not claimed.
func (s *Store) Claim(ctx context.Context, p idem.ClaimParams) (idem.ClaimResult, error) {
	rows, err := s.pool.Query(ctx, s.q.claim, p.Tenant, p.Key, p.Owner, p.LeaseDuration.Microseconds(), idem.ReasonAbandoned)
	if err != nil {
		return idem.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	defer rows.Close()
	var (
		res idem.ClaimResult
		r   row
	)
	found := rows.Next()
	if found {
		r, err = scanRow(p.ID, rows, &res.Claimed)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	switch {
	case err != nil:
		return idem.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
	case !found:
		return idem.ClaimResult{}, idem.ErrNotFound
	}
	res.Record = r.rec
	return res, nil
}

// Resolve implements idem.Store. The change is one statement that checks
// the state, the fence and the claim; when it matches no row, the record
// is read to say why.
func (s *Store) Resolve(ctx context.Context, p idem.ResolveParams) error {
	var (
		tag pgconn.CommandTag
		err error
	)
	if p.Result != nil {
		tag, err = s.pool.Exec(ctx, s.q.resolveCompleted, p.Tenant, p.Key, p.Fence, p.Claim, p.Retention.Microseconds(),
			p.Result.Status, recordcodec.AppendHeader(nil, p.Result.Header), nonNil(p.Result.Body))
	} else {
		tag, err = s.pool.Exec(ctx, s.q.resolveDeleted, p.Tenant, p.Key, p.Fence, p.Claim)
	}
	if err != nil {
		return fmt.Errorf("pgstore: resolve: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	rec, err := s.Get(ctx, p.ID)
	switch {
	case err != nil:
		return err
	case rec.State != idem.StateUnknown:
		return idem.ErrNotUnknown
	case rec.Fence != p.Fence:
		return idem.ErrStaleFence
	}
	return idem.ErrLeaseLost // the claim is another's, or it ended
}

// ListUnknown implements idem.Store. It pages through the partial index
// of UNKNOWN rows in (tenant, key) order; Next encodes the last row's
// tenant and key. An abandoned row is listed once an Acquire or a Claim
// has turned it UNKNOWN.
func (s *Store) ListUnknown(ctx context.Context, p idem.ListParams) (idem.ListPage, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = idem.DefaultListLimit
	}
	limit = min(limit, idem.MaxListLimit)
	var after idem.ID
	if p.After != "" {
		var err error
		if after, err = parseCursor(p.After); err != nil || (!p.AllTenants && after.Tenant != p.Tenant) {
			return idem.ListPage{}, fmt.Errorf("pgstore: list unknown: %w: cursor %q is not one of this listing", idem.ErrInvalidCursor, p.After)
		}
	}
	sql, args := s.q.listTenant, []any{p.Tenant, after.Key, limit + 1} // one more, to know whether a page follows
	if p.AllTenants {
		sql, args = s.q.listAll, []any{after.Tenant, after.Key, limit + 1}
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return idem.ListPage{}, fmt.Errorf("pgstore: list unknown: %w", err)
	}
	defer rows.Close()
	var page idem.ListPage
	for rows.Next() {
		if len(page.Records) == limit {
			last := page.Records[limit-1].ID
			page.Next = cursor(last)
			break
		}
		var id idem.ID
		r, err := scanRow(id, rows, &id.Tenant, &id.Key)
		if err != nil {
			return idem.ListPage{}, fmt.Errorf("pgstore: list unknown: %w", err)
		}
		r.rec.ID = id
		page.Records = append(page.Records, r.rec)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return idem.ListPage{}, fmt.Errorf("pgstore: list unknown: %w", err)
	}
	return page, nil
}

// cursor encodes id as a ListPage.Next: the tenant's length first, so that
// no tenant and key pair reads as another.
func cursor(id idem.ID) string {
	return strconv.Itoa(len(id.Tenant)) + ":" + id.Tenant + id.Key
}

func parseCursor(c string) (idem.ID, error) {
	n, rest, ok := strings.Cut(c, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return idem.ID{}, errors.New("malformed")
	}
	id := idem.ID{Tenant: rest[:size], Key: rest[size:]}
	if err := idem.ValidateTenant(id.Tenant); err != nil {
		return idem.ID{}, err
	}
	return id, idem.ValidateKey(id.Key)
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	r, ok, err := s.queryRow(ctx, s.q.get, id.Tenant, id.Key)
	if err != nil {
		return idem.Record{}, fmt.Errorf("pgstore: get: %w", err)
	}
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return r.rec, nil
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, p idem.DeleteParams) (bool, error) {
	var live bool
	if err := s.pool.QueryRow(ctx, s.q.del, p.Tenant, p.Key, p.Fence).Scan(&live); err != nil {
		return false, fmt.Errorf("pgstore: delete: %w", err)
	}
	return live, nil
}

var _ idem.Store = (*Store)(nil)
