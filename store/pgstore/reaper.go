package pgstore

import (
	"context"
	"fmt"
	"time"
)

// reapBatch is the most rows one statement of the reaper looks at, and
// reapTimeout bounds how long one statement may take: each is its own
// short transaction, so the reaper never holds locks for long.
const (
	reapBatch   = 1000
	reapTimeout = 30 * time.Second
)

// Reap looks at up to batch due records, deletes those that have expired
// and returns how many it looked at. A record is due at the end of the
// lease it was acquired with; one still live then (its lease was extended,
// or it was completed with a retention) is not deleted but moved to its
// real end, so the reaper looks at each record at most once per lease
// extension and once more at its end, however long its retention. A
// record whose end comes before its first lease ends is deleted when that
// lease would have ended; every query treats it as absent from its end on.
//
// The store's own reaper calls it (Options.ReapInterval); call it
// yourself only with that reaper off. Several reapers may run at once:
// each skips the rows another has locked. Call it until it returns less
// than batch to empty the backlog; a bounded batch keeps each transaction
// short.
func (s *Store) Reap(ctx context.Context, batch int) (int, error) {
	if err := s.made("reap"); err != nil {
		return 0, err
	}
	if batch <= 0 {
		return 0, fmt.Errorf("%w: reap batch %d, want > 0", ErrConfig, batch)
	}
	var deleted, moved int
	if err := s.pool.QueryRow(ctx, s.q.reap, batch).Scan(&deleted, &moved); err != nil {
		return 0, fmt.Errorf("pgstore: reap: %w", err)
	}
	return deleted + moved, nil
}

// startReaper runs a reaping pass every interval until Close.
func (s *Store) startReaper(every time.Duration) {
	ctx, stop := context.WithCancel(context.Background())
	s.stopReaper, s.reaperDone = stop, make(chan struct{})
	go func() {
		defer close(s.reaperDone)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			looked, err := s.reapPass(ctx)
			if ctx.Err() != nil {
				return // Close cut the pass short
			}
			if err != nil {
				s.log.Warn("pgstore: reaping expired rows failed; the next pass tries again", "schema", s.schema, "looked_at", looked, "err", err)
			}
			if s.onReap != nil {
				s.onReap(looked, err)
			}
		}
	}()
}

// reapPass calls Reap until a statement finds fewer than reapBatch due
// rows, and returns how many rows the statements looked at.
func (s *Store) reapPass(ctx context.Context) (int, error) {
	total := 0
	for {
		stmt, cancel := context.WithTimeout(ctx, reapTimeout)
		n, err := s.Reap(stmt, reapBatch)
		cancel()
		total += n
		if err != nil || n < reapBatch {
			return total, err
		}
	}
}
