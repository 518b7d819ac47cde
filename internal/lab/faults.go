package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/ctxtime"
	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The prepare functions start what a scenario's fault needs (its servers,
// proxies and clocks) and return the setup its runs inject it with.

func prepareFailover(ctx context.Context, lb *lab) (runSetup, error) {
	primary, err := lb.startRedis(ctx, nil, "--repl-diskless-sync-delay", "0")
	if err != nil {
		return runSetup{}, err
	}
	// The replica replicates through a proxy, so the lab can cut the link:
	// stopping the replica would not do, the kernel would buffer the stream.
	link, err := faultproxy.New(primary.Addr)
	if err != nil {
		primary.Kill()
		return runSetup{}, err
	}
	_, linkPort, _ := net.SplitHostPort(link.Addr())
	replica, err := lb.startRedis(ctx, nil, "--replicaof", "127.0.0.1", linkPort)
	if err != nil {
		primary.Kill()
		link.Close()
		return runSetup{}, err
	}
	cleanup := func() { primary.Kill(); replica.Kill(); link.Close() }
	if err := waitReplicated(ctx, replica.Addr); err != nil {
		cleanup()
		return runSetup{}, err
	}
	ep := newEndpoint(primary.Addr)
	S := lb.spread()
	fault := func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, S/5); err != nil {
			return err
		}
		link.SetMode(faultproxy.Partition) // from here on, writes acknowledged by the primary do not replicate
		if err := ctxtime.Sleep(ctx, S/2); err != nil {
			return err
		}
		primary.Kill()
		c := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer c.Close()
		if err := c.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
			return fmt.Errorf("promote the replica: %w", err)
		}
		ep.set(replica.Addr)
		return nil
	}
	return runSetup{ep: ep, fault: fault, cleanup: cleanup}, nil
}

func prepareCrash(ctx context.Context, lb *lab) (runSetup, error) {
	srv, err := lb.startRedis(ctx, nil)
	if err != nil {
		return runSetup{}, err
	}
	ep := newEndpoint(srv.Addr)
	S := lb.spread()
	fault := func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, S*6/10); err != nil {
			return err
		}
		srv.Kill()
		if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		return srv.Restart(ctx) // same port, empty
	}
	return runSetup{ep: ep, fault: fault, cleanup: srv.Kill}, nil
}

func prepareClock(ctx context.Context, lb *lab) (runSetup, error) {
	shim, err := buildClockShim(ctx)
	if err != nil {
		return runSetup{}, err
	}
	f, err := os.CreateTemp(lb.tmp, "clock-offset-")
	if err != nil {
		return runSetup{}, err
	}
	f.Close()
	offset := f.Name()
	if err := jumpClock(offset, 0); err != nil {
		return runSetup{}, err
	}
	srv, err := lb.startRedis(ctx, []string{"LD_PRELOAD=" + shim, "LAB_CLOCK_OFFSET_FILE=" + offset})
	if err != nil {
		return runSetup{}, err
	}
	ep := newEndpoint(srv.Addr)
	S := lb.spread()
	fault := func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, S/2); err != nil {
			return err
		}
		return jumpClock(offset, 2*time.Hour)
	}
	return runSetup{ep: ep, fault: fault, cleanup: srv.Kill}, nil
}

func prepareProxy(m faultproxy.Mode) func(ctx context.Context, lb *lab) (runSetup, error) {
	return func(ctx context.Context, lb *lab) (runSetup, error) {
		p, err := faultproxy.New(lb.redis.Addr)
		if err != nil {
			return runSetup{}, err
		}
		p.SetDelay(lb.lease * 3 / 2)
		ep := newEndpoint(p.Addr())
		S := lb.spread()
		fault := func(ctx context.Context) error {
			if err := ctxtime.Sleep(ctx, S/5); err != nil {
				return err
			}
			p.SetMode(m)
			defer p.SetMode(faultproxy.Forward)
			return ctxtime.Sleep(ctx, S/3)
		}
		return runSetup{ep: ep, fault: fault, cleanup: func() { p.Close() }}, nil
	}
}

func preparePGKill(ctx context.Context, lb *lab) (runSetup, error) {
	setup := runSetup{ep: newEndpoint(lb.redis.Addr)}
	setup.charged = func(ctx context.Context, key string, e Effect) Effect {
		if g, ok := e.(guardEffect); ok {
			lb.pg.pool.Exec(context.WithoutCancel(ctx), `SELECT pg_terminate_backend($1)`, g.pid)
		}
		return e
	}
	return setup, nil
}

func preparePGLostCommit(ctx context.Context, lb *lab) (runSetup, error) {
	cfg := lb.pg.pool.Config().Copy()
	p, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		return runSetup{}, err
	}
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	cfg.ConnConfig.Fallbacks = nil
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		p.Close()
		return runSetup{}, err
	}
	setup := runSetup{ep: newEndpoint(lb.redis.Addr), guard: guardLedger{pg: lb.pg, pool: pool}}
	setup.cleanup = func() { pool.Close(); p.Close() }
	// The commit that follows the first charge of a key loses its reply:
	// the server commits, the worker gets an error.
	var mu sync.Mutex
	setup.charged = func(ctx context.Context, key string, e Effect) Effect {
		g, ok := e.(guardEffect)
		if !ok {
			return e
		}
		g.atCommit = func(before bool) {
			if before {
				mu.Lock() // one lost commit at a time
				p.SetMode(faultproxy.DropAll)
				return
			}
			p.SetMode(faultproxy.Forward)
			mu.Unlock()
		}
		return g
	}
	return setup, nil
}

func prepareProviderCut(ctx context.Context, lb *lab) (runSetup, error) {
	setup := runSetup{ep: newEndpoint(lb.redis.Addr)}
	setup.afterCharge = func(ev chargeEvent, _ func(int)) bool { return ev.First }
	return setup, nil
}

func prepareWorkerKill(ctx context.Context, lb *lab) (runSetup, error) {
	setup := runSetup{ep: newEndpoint(lb.redis.Addr)}
	setup.afterCharge = func(ev chargeEvent, kill func(int)) bool {
		if !ev.First {
			return false
		}
		kill(ev.Worker) // the charge is made; its worker dies before it hears of it
		return true
	}
	return setup, nil
}

// storeStopWait bounds how long store-stop waits for the first provider call.
const storeStopWait = 30 * time.Second

func prepareStoreStop(ctx context.Context, lb *lab) (runSetup, error) {
	srv, err := lb.startRedis(ctx, nil)
	if err != nil {
		return runSetup{}, err
	}
	setup := runSetup{ep: newEndpoint(srv.Addr), cleanup: srv.Kill} // Kill continues a stopped server first
	L := unknownLease
	stopped := make(chan struct{})
	var once sync.Once
	setup.plan = func(int) (time.Duration, bool) {
		var d time.Duration
		once.Do(func() {
			if srv.Pause() == nil {
				close(stopped)
				d = L * 3 / 2
			}
		})
		return d, false
	}
	setup.fault = func(ctx context.Context) error {
		t := time.NewTimer(storeStopWait)
		defer t.Stop()
		select {
		case <-stopped:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return errors.New("no provider call came to stop the store on")
		}
		err := ctxtime.Sleep(ctx, L*5/2)
		return errors.Join(err, srv.Resume())
	}
	return setup, nil
}
