package check

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/lab"
)

// The product check's clock faults: its Redis server runs under the
// LD_PRELOAD clock shim of internal/lab (docs/failure-model.md, clock-jump),
// and a nemesis moves that server's wall clock, which Redis reads for every
// lease, record life, key TTL and fence (acquire.lua: max(last fence + 1,
// the clock in µs)). Within the guarantee only: a forward move is smaller
// than the shortest lease in play, so leases and records end early by that
// much (lives subtracts it); a backward move (up to 1 s) lengthens them,
// which no invariant bounds. What still holds: no double effect within the
// shortened life, and the fences of a key increase (fenceOrder).

// clockForwardMax bounds a forward move: below the shortest lease a run
// can have (orders' 300 ms), so that a lease ends early but not at once.
const clockForwardMax = 150 * time.Millisecond

// clockBackMax bounds a backward move.
const clockBackMax = time.Second

// redisClock is the offset of the product's Redis server's wall clock.
type redisClock struct {
	file, shim string

	mu      sync.Mutex
	offset  time.Duration // now
	forward time.Duration // the forward moves of this run, summed
	armed   time.Duration // a step back waiting for a key just taken (0: none)
	final   time.Duration // the final phase's move past every life (moveFinal)
}

// newRedisClock compiles the clock shim and starts the clock at offset
// 0; the product's private Redis servers run with its env. It fails the
// test without a C compiler: the shim is compiled at run time.
func newRedisClock(t *testing.T) *redisClock {
	t.Helper()
	shim, err := lab.ClockShim(t.Context())
	if err != nil {
		t.Fatalf("the product check moves its Redis server's clock with an LD_PRELOAD shim compiled by cc; install a C compiler "+
			"(Debian: apt-get install gcc, which scripts/services.sh does): %v", err)
	}
	c := &redisClock{file: filepath.Join(t.TempDir(), "clock-offset"), shim: shim}
	if err := lab.MoveClock(c.file, 0); err != nil {
		t.Fatal(err)
	}
	return c
}

// env is the environment of a Redis server whose clock c moves.
func (c *redisClock) env() []string {
	return []string{"LD_PRELOAD=" + c.shim, "LAB_CLOCK_OFFSET_FILE=" + c.file}
}

// move moves the clock by d.
func (c *redisClock) move(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	if d > 0 {
		c.forward += d
	}
	return lab.MoveClock(c.file, c.offset)
}

// arm makes the next call of fire step the clock by d.
func (c *redisClock) arm(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = d
}

// fire steps the clock by the armed move, if one is; it reports whether
// it did.
func (c *redisClock) fire() (bool, error) {
	c.mu.Lock()
	d := c.armed
	c.armed = 0
	c.mu.Unlock()
	if d == 0 {
		return false, nil
	}
	return true, c.move(d)
}

// reset sets the clock right before a run: what it moves is the earlier
// runs' keys, which are checked already; the run's sum starts at 0.
func (c *redisClock) reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset, c.forward, c.armed, c.final = 0, 0, 0, 0
	return lab.MoveClock(c.file, 0)
}

// moveFinal moves the clock forward by d for the final phase's last
// retries, past every life. It counts in final, not in shortened: no
// request of the run's other keys comes after it.
func (c *redisClock) moveFinal(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	c.final += d
	return lab.MoveClock(c.file, c.offset)
}

// finalMove is what moveFinal moved.
func (c *redisClock) finalMove() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.final
}

// shortened is how much earlier than its life a record of this run may
// end: every forward move so far (an over-estimate for a key that was not
// live across them).
func (c *redisClock) shortened() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forward
}

// clockStep is one move of the Redis server's clock. A step is not
// undone (a VM restored, an operator's date, a leap second stepped): the
// server runs on at the new offset. A clock found ahead is stepped back by
// NTP when the fault heals (corrected). A clock behind is not corrected
// within a run: NTP's step forward would be a forward move as large as the
// backward one, past the guarantee (and a slew at 500 ppm moves it by
// nothing in a run).
//
// A step back matters to a key taken again within the step (its next
// fence would come from a clock that reads less than at its last one):
// a key released and retried at once, or deleted. Such a pair is a few
// milliseconds long, and few in a run: a step at a random moment falls
// between one in a few runs of ten (measured: such gaps sum to about 0.8 s
// in a 5 s run, seeds 10 to 13). So the step back is made at the
// moment the upstream gets a request it refuses with 400 or 401 and the
// client sends again at once, corrected (X-Check-Retried), which the
// route's policy mostly releases; when none comes before the fault heals,
// at the heal.
type clockStep struct {
	pe        *productEnv
	c         *redisClock
	back      bool // else forward
	corrected bool // stepped back to where it was when the fault heals (forward only)
}

// Name implements Nemesis.
func (n clockStep) Name() string {
	switch {
	case n.back:
		return "redis clock stepped back"
	case n.corrected:
		return "redis clock ahead, corrected by NTP"
	}
	return "redis clock stepped forward"
}

// Inject implements Nemesis.
func (n clockStep) Inject(_ context.Context, rng *rand.Rand) (func() error, error) {
	if !n.pe.store.cur.Load().clocked { // Sentinel, Cluster, PostgreSQL: servers on the machine's clock
		n.pe.did("clock fault without a clocked store")
		return func() error { return nil }, nil
	}
	if n.back {
		n.c.arm(-(100*time.Millisecond + time.Duration(rng.Int64N(int64(clockBackMax-100*time.Millisecond)))))
		return func() error {
			fired, err := n.c.fire()
			if fired {
				n.pe.did("clock back at the heal")
			}
			return err
		}, nil
	}
	by := 20*time.Millisecond + time.Duration(rng.Int64N(int64(clockForwardMax-20*time.Millisecond)))
	if err := n.c.move(by); err != nil {
		return nil, err
	}
	n.pe.did("clock forward")
	if !n.corrected {
		return func() error { return nil }, nil
	}
	return func() error {
		n.pe.did("clock corrected")
		return n.c.move(-by)
	}, nil
}

// clockNemeses are the moves of the Redis server's clock: three of the
// product's seven faults, so that most runs move it.
func (c *redisClock) nemeses(pe *productEnv) []Nemesis {
	return []Nemesis{clockStep{pe: pe, c: c}, clockStep{pe: pe, c: c, corrected: true}, clockStep{pe: pe, c: c, back: true}}
}

// fenceOrder holds the upstream's view of the fences: a request sent after
// the upstream got fence f for its key acquired the key after f was
// minted, so its fence is higher (acquire.lua takes max(last fence + 1,
// the clock); a record's key keeps its last fence for an hour past its
// life, through a delete or a release). A lower one, after the clock went
// back, would let a stale owner's write through a provider that fences by
// the highest fence it saw; the ledger would refuse the new one, which the
// other invariants do not see.
type fenceOrder struct {
	mu   sync.Mutex
	seen map[string][]fenceSeen // the key's id → the fences the upstream got
}

type fenceSeen struct {
	fence int64
	at    int64 // the recorder's clock
}

// reset forgets the earlier runs.
func (o *fenceOrder) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = map[string][]fenceSeen{}
}

// sawFence records that the upstream got fence for the key of r (a
// request of the run's clients, X-Check-Began its send) and checks it
// against those it got before that request was sent.
func (pe *productEnv) sawFence(key string, fence int64, r *http.Request) {
	began, err := strconv.ParseInt(r.Header.Get("X-Check-Began"), 10, 64)
	if err != nil {
		return
	}
	if r.Header.Get("X-Check-Retried") == "1" { // refused, and sent again at once when answered
		if fired, err := pe.clock.fire(); fired {
			pe.did("clock back at a release")
			if err != nil {
				pe.t.Errorf("moving the Redis clock: %v", err)
			}
		}
	}
	o, rec, now := &pe.fences, pe.rec, pe.rec.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.seen[key]
	for _, s := range seen {
		if s.at < began && s.fence >= fence {
			rec.saw(Violation{"fence", key, fmt.Sprintf("the upstream got fence %d at %v for a request sent at %v, after it got fence %d at %v: a later acquisition's fence is not higher",
				fence, ms(now), ms(began), s.fence, ms(s.at))})
			break
		}
	}
	if len(seen) > 0 && now-seen[len(seen)-1].at < int64(clockBackMax) {
		pe.did("fence again within 1s") // what a step back of the clock can reach
	}
	o.seen[key] = append(seen, fenceSeen{fence, now})
}
