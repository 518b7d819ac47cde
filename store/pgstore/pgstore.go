package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/internal/listcursor"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/recordcodec"
)

// Errors of this package.
var (
	// ErrConfig is returned by New, Migrate and Store.Reap for an option or
	// argument they cannot use, by every method of a Store that New did
	// not make (a zero Store), and by the guardrail for a nil argument.
	ErrConfig = errors.New("pgstore: bad configuration")
	// ErrDuplicate is returned by Store.Reserve and FencedExec, together
	// with PostgreSQL's unique_violation (23505), when the key is already
	// reserved by a committed (or committing) transaction. The work must
	// not run again; read the recorded outcome with Store.Reservation
	// instead.
	ErrDuplicate = errors.New("pgstore: idempotency key already reserved")
	// ErrStaleFence is returned by Store.Settle and FencedExec when a
	// fenced write matched no row, because a holder with a higher fence
	// wrote it (or it was settled already, or is missing). It is
	// store.ErrStaleFence, which idem.ErrStaleFence is too: one value for
	// a fence that lost, as fs.ErrNotExist is os.ErrNotExist.
	ErrStaleFence = store.ErrStaleFence
)

// acquireTries bounds how often Acquire runs its statement: again when the
// live row that blocked the INSERT was gone before it could be read, or
// after a lost connection.
const acquireTries = 4

// Acquire implements store.Store.
//
// After a connection error the statement runs again with the same owner: if
// the first try had taken the key, the second finds the row with this
// owner and reports it acquired, so a lost reply never leaves the key held
// by nobody until the lease ends.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := s.made("acquire"); err != nil {
		return store.AcquireResult{}, err
	}
	var err error
	for try := range acquireTries {
		var (
			res   store.AcquireResult
			found bool
		)
		if try > 0 && err != nil && p.TakeOver {
			// The lost try may have taken the key, and its lease may have
			// ended since: the statement would take over this very call's
			// row. Look for it first, and do not run the statement before
			// a look has answered: a lost look leaves err set, so the next
			// try looks again.
			res, found, err = s.own(ctx, p)
			switch {
			case err == nil && found:
				return res, nil
			case err != nil && (ctx.Err() != nil || !isConnectionError(err)):
				return store.AcquireResult{}, fmt.Errorf("pgstore: acquire: %w", err)
			case err != nil:
				continue
			}
		}
		res, found, err = s.acquireOnce(ctx, p)
		switch {
		case err == nil && found:
			return res, nil
		case err == nil: // the holder went away between the INSERT and the read: try again
		case ctx.Err() != nil || !isConnectionError(err):
			return store.AcquireResult{}, fmt.Errorf("pgstore: acquire: %w", err)
		}
	}
	if err == nil {
		err = errors.New("the key changed hands on every try")
	}
	return store.AcquireResult{}, fmt.Errorf("pgstore: acquire: %w", err)
}

// acquireOnce runs the acquire statement and, when a live row blocked it,
// reads that row; it turns an abandoned row UNKNOWN unless p takes it
// over (p.TakeOver, and the row's request is p's: its fingerprint). found is false when the row changed under it: try again.
func (s *Store) acquireOnce(ctx context.Context, p store.AcquireParams) (res store.AcquireResult, found bool, err error) {
	keep := max(p.Retention, p.KeyRetention) // when the reaper first looks at the row (reap_at), past the lease
	r, ok, err := s.queryRow(ctx, s.q.acquire, p.Tenant, p.Key, p.Owner, p.Fingerprint, p.LeaseDuration.Microseconds(),
		(p.LeaseDuration + keep).Microseconds(), p.TakeOver, p.Label, p.Retention.Microseconds(), p.KeyRetention.Microseconds())
	switch {
	case err != nil:
		return store.AcquireResult{}, false, err
	case ok:
		// Ours, even when its lease ended before RETURNING read the row.
		return r.acquired(), true, nil
	}
	r, ok, err = s.queryRow(ctx, s.q.get, p.Tenant, p.Key)
	switch {
	case err != nil || !ok:
		return store.AcquireResult{}, false, err
	case r.owned(p.Owner):
		// A PROCESSING row with our owner token is ours: owner tokens are
		// unique per attempt, so an earlier try of this very call took it,
		// and its reply was lost. Its lease may have ended meanwhile:
		// still ours, not an abandoned attempt (nothing ran under it); the
		// engine's deadline, counted from before the first try, has ended
		// with it.
		return r.acquired(), true, nil
	case r.abandoned && p.TakeOver && r.rec.Fingerprint == p.Fingerprint: // the lease ended after the INSERT looked: it takes over now
		return store.AcquireResult{}, false, nil
	case r.abandoned:
		// A third statement, only for a key whose owner crashed or stalled.
		r, ok, err = s.queryRow(ctx, s.q.abandon, p.Tenant, p.Key, r.rec.Fence, store.ReasonAbandoned)
		return store.AcquireResult{Record: r.rec}, ok, err
	}
	return store.AcquireResult{Record: r.rec}, true, nil
}

// own reads the key's row and reports it acquired when it is this call's
// own PROCESSING row (its lease ended or not).
func (s *Store) own(ctx context.Context, p store.AcquireParams) (store.AcquireResult, bool, error) {
	r, ok, err := s.queryRow(ctx, s.q.get, p.Tenant, p.Key)
	if err != nil || !ok || !r.owned(p.Owner) {
		return store.AcquireResult{}, false, err
	}
	return r.acquired(), true, nil
}

// owned reports whether r is a PROCESSING row (its lease ended or not) of
// owner.
func (r row) owned(owner string) bool {
	return r.rec.Owner == owner && (r.rec.State == store.StateProcessing || r.abandoned)
}

// acquired is the answer to the acquisition of r by its owner: PROCESSING,
// as every store answers an acquisition, even when the lease ended before
// the row was read (a stall after the INSERT's clock, or a lost reply
// tried again); what is left of such a lease is nothing, not the row's
// life. The engine counts its own deadline from before the call.
func (r row) acquired() store.AcquireResult {
	rec := r.rec
	rec.State, rec.Reason = store.StateProcessing, ""
	if r.abandoned {
		rec.CompletedAt, rec.TTL = time.Time{}, 0
	}
	return store.AcquireResult{Acquired: true, Record: rec, Takeover: r.takeover}
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
		r, err = scanRow(store.ID{Tenant: args[0].(string), Key: args[1].(string)}, rows)
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

// Complete implements store.Store.
//
// A Complete that finds the key already COMPLETED by the same owner and
// fence is a retry whose first try landed (its reply was lost): it
// succeeds. That check runs only when the update matched no row, so the
// common case is one statement.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	if err := s.made("complete"); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.q.complete, p.Tenant, p.Key, p.Owner, p.Fence, p.Retention.Microseconds(),
		p.Result.Status, recordcodec.AppendHeader(nil, p.Result.Header), nonNil(p.Result.Body), p.KeyRetention.Microseconds())
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
		return store.ErrLeaseLost
	}
	return nil
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, p store.ExtendParams) error {
	if err := s.made("extend"); err != nil {
		return err
	}
	return s.transition(ctx, "extend", s.q.extend, p.Tenant, p.Key, p.Owner, p.Fence, p.LeaseDuration.Microseconds(),
		p.Retention.Microseconds(), p.KeyRetention.Microseconds())
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.LeaseRef) error {
	if err := s.made("release"); err != nil {
		return err
	}
	return s.transition(ctx, "release", s.q.release, p.Tenant, p.Key, p.Owner, p.Fence, store.ReasonAbandoned)
}

// MarkUnknown implements store.Store.
func (s *Store) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	if err := s.made("mark unknown"); err != nil {
		return err
	}
	return s.transition(ctx, "mark unknown", s.q.markUnknown, p.Tenant, p.Key, p.Owner, p.Fence, p.Reason,
		p.Retention.Microseconds(), p.KeyRetention.Microseconds())
}

func (s *Store) transition(ctx context.Context, op, sql string, args ...any) error {
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrLeaseLost
	}
	return nil
}

// Claim implements store.Store. One statement decides and returns the row
// it decided on: a second read could see a row changed since (marked
// UNKNOWN by its owner, say) and report it not claimed.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := s.made("claim"); err != nil {
		return store.ClaimResult{}, err
	}
	rows, err := s.pool.Query(ctx, s.q.claim, p.Tenant, p.Key, p.Owner, p.LeaseDuration.Microseconds(), store.ReasonAbandoned)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
	}
	defer rows.Close()
	var (
		res store.ClaimResult
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
		return store.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
	case !found:
		return store.ClaimResult{}, store.ErrNotFound
	}
	res.Record = r.rec
	return res, nil
}

// Resolve implements store.Store. The change is one statement that checks
// the state, the fence and the claim; when it matches no row, the record
// is read to say why.
func (s *Store) Resolve(ctx context.Context, p store.ResolveParams) error {
	if err := s.made("resolve"); err != nil {
		return err
	}
	var (
		tag pgconn.CommandTag
		err error
	)
	if p.Result != nil {
		tag, err = s.pool.Exec(ctx, s.q.resolveCompleted, p.Tenant, p.Key, p.Fence, p.Claim, p.Retention.Microseconds(),
			p.Result.Status, recordcodec.AppendHeader(nil, p.Result.Header), nonNil(p.Result.Body), p.KeyRetention.Microseconds())
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
	case rec.State != store.StateUnknown:
		return store.ErrNotUnknown
	case rec.Fence != p.Fence:
		return store.ErrStaleFence
	}
	return store.ErrLeaseLost // the claim is another's, or it ended
}

// ListUnknown implements store.Store. It pages through the partial index
// of UNKNOWN rows in (tenant, key) order, with the PROCESSING rows whose
// lease ended (reported UNKNOWN, abandoned), which the index of leases
// holds; Next encodes the last row's tenant and key.
func (s *Store) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	if err := s.made("list unknown"); err != nil {
		return store.ListPage{}, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	limit = min(limit, store.MaxListLimit)
	after, ok := listcursor.After(p)
	if !ok {
		return store.ListPage{}, fmt.Errorf("pgstore: list unknown: %w: cursor %q is not one of this listing", store.ErrInvalidCursor, p.After)
	}
	sql, args := s.q.listTenant, []any{p.Tenant, after.Key, limit + 1} // one more, to know whether a page follows
	if p.AllTenants {
		sql, args = s.q.listAll, []any{after.Tenant, after.Key, limit + 1}
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return store.ListPage{}, fmt.Errorf("pgstore: list unknown: %w", err)
	}
	defer rows.Close()
	var page store.ListPage
	for rows.Next() {
		if len(page.Records) == limit {
			last := page.Records[limit-1].ID
			page.Next = listcursor.Next(last)
			break
		}
		var id store.ID
		r, err := scanRow(id, rows, &id.Tenant, &id.Key)
		if err != nil {
			return store.ListPage{}, fmt.Errorf("pgstore: list unknown: %w", err)
		}
		r.rec.ID = id
		page.Records = append(page.Records, r.rec)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return store.ListPage{}, fmt.Errorf("pgstore: list unknown: %w", err)
	}
	return page, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id store.ID) (store.Record, error) {
	if err := s.made("get"); err != nil {
		return store.Record{}, err
	}
	r, ok, err := s.queryRow(ctx, s.q.get, id.Tenant, id.Key)
	if err != nil {
		return store.Record{}, fmt.Errorf("pgstore: get: %w", err)
	}
	if !ok {
		return store.Record{}, store.ErrNotFound
	}
	return r.rec, nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	if err := s.made("delete"); err != nil {
		return false, err
	}
	var live bool
	if err := s.pool.QueryRow(ctx, s.q.del, p.Tenant, p.Key, p.Fence).Scan(&live); err != nil {
		return false, fmt.Errorf("pgstore: delete: %w", err)
	}
	return live, nil
}

var _ store.Store = (*Store)(nil)
