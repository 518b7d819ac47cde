package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Schema holds the store's tables and its fence sequence, as created
	// by Migrate. Empty means DefaultSchema ("idem"). Lower-case letters,
	// digits and underscores only.
	Schema string
	// ReapInterval is how often the store's reaper deletes the rows whose
	// life ended (see Store.Reap), the first time one interval after New.
	// Zero means DefaultReapInterval; negative turns the reaper off, for a
	// process that calls Store.Reap itself or leaves it to another: several
	// stores on one schema share the work. Store.Close stops the reaper.
	ReapInterval time.Duration
	// Logger receives the reaper's warnings, one per failed pass. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// DefaultReapInterval is how often the reaper runs when
// Options.ReapInterval is zero.
const DefaultReapInterval = time.Minute

// Store is an store.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	q      queries
	log    *slog.Logger

	// The reaper's, nil when it is off: stopReaper ends it, reaperDone
	// is closed when it has. onReap, set by tests before it starts, is
	// called after each pass.
	stopReaper context.CancelFunc
	reaperDone chan struct{}
	onReap     func(looked int, err error)
}

// New returns a store on pool, whose tables Migrate has created, and
// starts its reaper unless Options.ReapInterval is negative. Call Close
// when done with the store.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	return newStore(pool, opts, nil)
}

// newStore is New with the tests' onReap.
func newStore(pool *pgxpool.Pool, opts *Options, onReap func(int, error)) (*Store, error) {
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
	if err := CheckSchema(o.Schema); err != nil {
		return nil, err
	}
	if o.ReapInterval == 0 {
		o.ReapInterval = DefaultReapInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Store{pool: pool, schema: o.Schema, q: newQueries(o.Schema), log: o.Logger, onReap: onReap}
	if o.ReapInterval > 0 {
		s.startReaper(o.ReapInterval)
	}
	return s, nil
}

// errNotMade is returned by every method of a Store that New did not
// make (a zero Store, or a nil *Store): it has no pool and no statements.
var errNotMade = fmt.Errorf("%w: Store not made with New (or storeurl.Open): a zero or nil *Store has no pool", ErrConfig)

// made returns errNotMade, naming op, for a Store that New did not make:
// its methods would panic on the missing pool or send empty statements.
func (s *Store) made(op string) error {
	if s == nil || s.pool == nil {
		return fmt.Errorf("pgstore: %s: %w", op, errNotMade)
	}
	return nil
}

// Close stops the reaper and waits for a pass in progress to end. It does
// not close the pool, which stays the caller's. Calling it again does
// nothing.
func (s *Store) Close() error {
	if err := s.made("close"); err != nil {
		return err
	}
	if s.stopReaper != nil {
		s.stopReaper()
		<-s.reaperDone
	}
	return nil
}
