package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// acquireCounter counts the acquires the engine makes and closes all when
// there were want of them, so a test knows when every request of a burst
// has reached the store.
type acquireCounter struct {
	want int64
	n    atomic.Int64
	all  chan struct{}
}

func newAcquireCounter(want int64) *acquireCounter {
	return &acquireCounter{want: want, all: make(chan struct{})}
}

func (c *acquireCounter) StoreCall(_ context.Context, op string, _ time.Duration, _ error) {
	if op == "acquire" && c.n.Add(1) == c.want {
		close(c.all)
	}
}
func (c *acquireCounter) LeaseEvent(store.ID, idem.LeaseEvent) {}

// TestBurst: 100 concurrent requests with one key run the handler once;
// the others get 409, or the replay in wait mode.
func TestBurst(t *testing.T) {
	const n = 100
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		for _, wait := range []time.Duration{0, 10 * time.Second} {
			t.Run("wait="+wait.String(), func(t *testing.T) {
				acquires := newAcquireCounter(n)
				e := newEngine(t, newStore(t), &idem.Options{Observer: acquires})
				var calls atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					calls.Add(1)
					// Hold the key until every request has tried to take it.
					select {
					case <-acquires.all:
					case <-time.After(10 * time.Second):
						t.Errorf("%d of %d requests reached the store", acquires.n.Load(), n)
					}
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, "charged once")
				})
				srv := serve(t, newMiddleware(t, e, &idemhttp.Options{Wait: wait})(h))
				srv.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = n
				results := make([]response, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() { results[i] = call{key: "burst", body: "{}", ct: "application/json"}.send(t, srv) })
				}
				wg.Wait()
				var created, conflicts, replays int
				for _, r := range results {
					switch {
					case r.status == 201 && r.header.Get(idemhttp.HeaderReplayed) == "true" && string(r.body) == "charged once":
						replays++
					case r.status == 201 && string(r.body) == "charged once":
						created++
					case r.status == 409:
						checkProblem(t, r, 409, idemhttp.CodeKeyInFlight)
						if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 30 {
							t.Errorf("Retry-After %q, want 1..30 seconds", r.header.Get("Retry-After"))
						}
						conflicts++
					default:
						t.Errorf("unexpected answer %d %q", r.status, r.body)
					}
				}
				if c := calls.Load(); c != 1 || created != 1 {
					t.Fatalf("the handler ran %d times, %d first answers", c, created)
				}
				if wait == 0 && conflicts != n-1 {
					t.Errorf("%d conflicts, want %d", conflicts, n-1)
				}
				if wait > 0 && replays != n-1 {
					t.Errorf("%d replays, want %d", replays, n-1)
				}
			})
		}
	})
}

// TestWaitEndsWith409: a request that waits longer than Wait gets the 409,
// once the Wait is over.
func TestWaitEndsWith409(t *testing.T) {
	eachStoreInBubble(t, func(t *testing.T, s store.Store) {
		const wait = 30 * time.Millisecond
		release := make(chan struct{})
		started := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
		})
		mw := newMiddleware(t, newEngine(t, s, nil), &idemhttp.Options{Wait: wait})(h)
		first := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			mw.ServeHTTP(first, call{key: "k"}.request(t, "http://example.test"))
		}()
		<-started
		second := httptest.NewRecorder()
		start := time.Now()
		mw.ServeHTTP(second, call{key: "k"}.request(t, "http://example.test"))
		if waited := time.Since(start); waited < wait {
			t.Errorf("the 409 came after %v; want after the %v Wait", waited, wait)
		}
		checkProblem(t, recorded(second), 409, idemhttp.CodeKeyInFlight)
		close(release)
		<-done
		if first.Code != 200 {
			t.Errorf("first request: %d", first.Code)
		}
	})
}

// TestWritePaths: whichever way a handler answers, the replay is
// byte-exact.
func TestWritePaths(t *testing.T) {
	binary := make([]byte, 0, 600<<10)
	for i := 0; len(binary) < cap(binary); i++ {
		binary = append(binary, byte(i), byte(i>>8), byte(i*7))
	}
	small := []byte("hello\x00world\xff")
	tests := []struct {
		name    string
		handler func(t *testing.T, w http.ResponseWriter)
		status  int
		body    []byte
	}{
		{"Write", func(t *testing.T, w http.ResponseWriter) { w.Write(small) }, 200, small},
		{"WriteHeader and Writes", func(t *testing.T, w http.ResponseWriter) {
			w.WriteHeader(http.StatusAccepted)
			w.Write(small[:3])
			w.Write(small[3:])
		}, 202, small},
		{"WriteString", func(t *testing.T, w http.ResponseWriter) {
			sw, ok := w.(io.StringWriter)
			if !ok {
				t.Error("the writer is no io.StringWriter")
				return
			}
			if n, err := sw.WriteString(string(small[:5])); n != 5 || err != nil {
				t.Errorf("WriteString: %d, %v", n, err)
			}
			w.Write(small[5:])
		}, 200, small},
		{"implicit 200, nothing written", func(t *testing.T, w http.ResponseWriter) {}, 200, nil},
		{"WriteHeader only", func(t *testing.T, w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }, 204, nil},
		{"ReadFrom", func(t *testing.T, w http.ResponseWriter) {
			rf, ok := w.(io.ReaderFrom)
			if !ok {
				t.Error("the writer is no io.ReaderFrom")
				return
			}
			if n, err := rf.ReadFrom(struct{ io.Reader }{bytes.NewReader(binary)}); err != nil || n != int64(len(binary)) {
				t.Errorf("ReadFrom: %d, %v", n, err)
			}
		}, 200, binary},
		{"io.Copy", func(t *testing.T, w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.Copy(w, io.LimitReader(bytes.NewReader(binary), int64(len(binary))))
		}, 201, binary},
		{"ResponseController Flush", func(t *testing.T, w http.ResponseWriter) {
			rc := http.NewResponseController(w)
			w.Write(small[:4])
			if err := rc.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			w.Write(small[4:])
		}, 200, small},
		{"Flusher before writing", func(t *testing.T, w http.ResponseWriter) {
			w.(http.Flusher).Flush()
			w.Write(small)
		}, 200, small},
		{"Unwrap reaches the connection's deadlines", func(t *testing.T, w http.ResponseWriter) {
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("SetWriteDeadline: %v", err)
			}
			w.WriteHeader(http.StatusCreated)
			w.Write(small)
		}, 201, small},
		{"1xx before the final status", func(t *testing.T, w http.ResponseWriter) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
			w.Write(small)
		}, 201, small},
	}
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var calls atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					calls.Add(1)
					w.Header().Set("Content-Type", "application/octet-stream")
					tt.handler(t, w)
				})
				srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), nil), nil)(h))
				first := call{key: "k"}.send(t, srv)
				replay := call{key: "k"}.send(t, srv)
				for _, r := range []response{first, replay} {
					if r.status != tt.status || !bytes.Equal(r.body, tt.body) {
						t.Errorf("got %d with %d bytes, want %d with %d bytes", r.status, len(r.body), tt.status, len(tt.body))
					}
				}
				if replay.header.Get(idemhttp.HeaderReplayed) != "true" || calls.Load() != 1 {
					t.Errorf("replayed %q, %d calls", replay.header.Get(idemhttp.HeaderReplayed), calls.Load())
				}
				if tt.status != 204 && replay.header.Get("Content-Type") != "application/octet-stream" {
					t.Errorf("replayed Content-Type %q", replay.header.Get("Content-Type"))
				}
			})
		}
	})
}

// TestPanic: a panicking handler may have taken effect before it
// panicked: the key turns UNKNOWN, the retry gets 503 outcome_unknown with
// Retry-After and never runs the handler again; the panic goes on.
func TestPanic(t *testing.T) {
	for _, tt := range []struct {
		name  string
		panic any
		write bool
	}{{"before answering", "boom", false}, {"after answering", http.ErrAbortHandler, true}} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if tt.write {
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, "half a bo")
				}
				panic(tt.panic)
			})
			var outs outcomes
			mw := newMiddleware(t, newEngine(t, s, nil), &idemhttp.Options{OnOutcome: outs.record})(h)
			func() {
				defer func() {
					if p := recover(); p != tt.panic {
						t.Fatalf("recovered %v, want the handler's panic", p)
					}
				}()
				mw.ServeHTTP(httptest.NewRecorder(), call{key: "k"}.request(t, "http://example.test"))
			}()
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
			if calls.Load() != 1 || rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), idemhttp.CodeOutcomeUnknown) {
				t.Fatalf("retry after a panic: %d calls, %d %s; want 1 call and a 503 outcome_unknown", calls.Load(), rec.Code, rec.Body)
			}
			if ra, ok := rec.Header()["Retry-After"]; ok {
				t.Errorf("Retry-After %q; want none: no reconciliation is configured, nothing settles the key by itself", ra)
			}
			if outs.count(idemhttp.OutcomeMarkedUnknown) != 1 || outs.count(idemhttp.OutcomeKeyUnknown) != 1 {
				t.Errorf("outcomes %v; want marked_unknown then unknown", outs.list)
			}
		})
	}
}

// TestClientDisconnect: the handler goes on after its client left, and the
// retry gets the recorded result.
func TestClientDisconnect(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		clientGone := make(chan context.Context, 1)
		handlerCtxErr := make(chan error, 1)
		entered := make(chan struct{}, 2)
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			entered <- struct{}{}
			orig := <-clientGone
			<-orig.Done() // the server noticed that the client left
			handlerCtxErr <- r.Context().Err()
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged") // fails on the wire, recorded anyway
		})
		outs := outcomes{ch: make(chan idemhttp.Outcome, 4)}
		mw := newMiddleware(t, newEngine(t, newStore(t), nil), &idemhttp.Options{OnOutcome: outs.record})(h)
		srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			clientGone <- r.Context()
			mw.ServeHTTP(w, r)
		}))
		ctx, cancel := context.WithCancel(context.Background())
		req := call{key: "k"}.request(t, srv.URL).WithContext(ctx)
		errc := make(chan error, 1)
		go func() {
			res, err := srv.Client().Do(req)
			if err == nil {
				res.Body.Close()
			}
			errc <- err
		}()
		<-entered
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("client: %v", err)
		}
		if err := <-handlerCtxErr; err != nil {
			t.Errorf("the handler's context ended with its client: %v", err)
		}
		if out := <-outs.ch; out != idemhttp.OutcomeExecuted {
			t.Fatalf("outcome %v", out)
		}
		r := call{key: "k"}.send(t, srv)
		if r.status != 201 || string(r.body) != "charged" || r.header.Get(idemhttp.HeaderReplayed) != "true" || calls.Load() != 1 {
			t.Errorf("retry got %d %q replayed=%q after %d calls", r.status, r.body, r.header.Get(idemhttp.HeaderReplayed), calls.Load())
		}
	})
}

// TestLeaseLost: when the key is taken away mid-handler the handler's
// context is cancelled, and its result never overwrites the new owner's.
func TestLeaseLost(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		e := newEngine(t, newStore(t), &idem.Options{LeaseDuration: 2 * time.Second, RenewEvery: 10 * time.Millisecond})
		started, cancelled, secondDone := make(chan struct{}), make(chan error, 1), make(chan struct{})
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 2 {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "second")
				return
			}
			close(started)
			select {
			case <-r.Context().Done():
				cancelled <- context.Cause(r.Context())
			case <-time.After(10 * time.Second):
				cancelled <- errors.New("the context was not cancelled")
			}
			<-secondDone
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "first")
		})
		outs := outcomes{ch: make(chan idemhttp.Outcome, 8)}
		srv := serve(t, newMiddleware(t, e, &idemhttp.Options{OnOutcome: outs.record})(h))
		first := make(chan response, 1)
		go func() { first <- call{key: "k"}.send(t, srv) }()
		<-started
		if ok, err := e.ForceDelete(context.Background(), store.ID{Key: "k"}); !ok || err != nil {
			t.Fatalf("Delete: %v %v", ok, err)
		}
		if err := <-cancelled; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", err)
		}
		if r := (call{key: "k"}).send(t, srv); r.status != 201 || string(r.body) != "second" {
			t.Fatalf("the new owner got %d %q", r.status, r.body)
		}
		if out := <-outs.ch; out != idemhttp.OutcomeExecuted {
			t.Fatalf("the new owner's outcome: %v", out)
		}
		close(secondDone)
		<-first
		if out := <-outs.ch; out != idemhttp.OutcomeLeaseLost {
			t.Fatalf("the old owner's outcome: %v", out)
		}
		if r := (call{key: "k"}).send(t, srv); string(r.body) != "second" || r.header.Get(idemhttp.HeaderReplayed) != "true" {
			t.Errorf("replay %d %q: the old owner overwrote the new one", r.status, r.body)
		}
	})
}

// TestLeaseInContext: the handler runs on the lease's context and can read
// the fence.
func TestLeaseInContext(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		fences := make(chan int64, 2)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l, ok := idem.LeaseFromContext(r.Context())
			if !ok {
				fences <- 0
				return
			}
			if l.Context().Done() != r.Context().Done() {
				t.Error("the handler's context is not the lease's")
			}
			fences <- l.Fence()
		})
		srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), nil), nil)(h))
		call{key: "a"}.send(t, srv)
		call{key: "b"}.send(t, srv)
		if a, b := <-fences, <-fences; a <= 0 || b <= a {
			t.Errorf("fences %d, %d: want positive and increasing", a, b)
		}
		if _, ok := idem.LeaseFromContext(context.Background()); ok {
			t.Error("a lease in a bare context")
		}
	})
}

// TestNotReplayable: a hijacked connection, a response streamed past the
// buffer and one over the engine's result limit all run once; retries get
// 422 not_replayable instead of a second execution.
func TestNotReplayable(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	tests := []struct {
		name    string
		opts    idemhttp.Options
		engine  idem.Options
		handler func(t *testing.T, w http.ResponseWriter)
		body    []byte
	}{
		{"hijacked", idemhttp.Options{}, idem.Options{}, func(t *testing.T, w http.ResponseWriter) {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			rw.Flush()
		}, []byte("ok")},
		{"streamed past the buffer", idemhttp.Options{MaxResponseBuffer: 1024}, idem.Options{}, func(t *testing.T, w http.ResponseWriter) {
			for i := 0; i < len(big); i += 1000 {
				w.Write(big[i:min(i+1000, len(big))])
				w.(http.Flusher).Flush()
			}
		}, big},
		{"WriteString past the buffer", idemhttp.Options{MaxResponseBuffer: 1024}, idem.Options{}, func(t *testing.T, w http.ResponseWriter) {
			s := string(big)
			for i := 0; i < len(s); i += 1000 {
				io.WriteString(w, s[i:min(i+1000, len(s))])
			}
		}, big},
		{"over the store's result limit", idemhttp.Options{}, idem.Options{MaxResultBytes: 100}, func(t *testing.T, w http.ResponseWriter) {
			w.Write(big)
		}, big},
	}
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var calls atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					calls.Add(1)
					tt.handler(t, w)
				})
				outs := outcomes{ch: make(chan idemhttp.Outcome, 8)}
				opts := tt.opts
				opts.OnOutcome = outs.record
				srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), &tt.engine), &opts)(h))
				if r := (call{key: "k"}).send(t, srv); r.status != 200 || !bytes.Equal(r.body, tt.body) {
					t.Fatalf("first answer %d with %d bytes", r.status, len(r.body))
				}
				// The client can have the whole answer before the handler returned.
				if out := <-outs.ch; out != idemhttp.OutcomeExecuted {
					t.Fatalf("first outcome %v", out)
				}
				for range 2 {
					checkProblem(t, call{key: "k"}.send(t, srv), 422, idemhttp.CodeNotReplayable)
				}
				if calls.Load() != 1 || outs.count(idemhttp.OutcomeExecuted) != 1 || outs.count(idemhttp.OutcomeNotReplayable) != 2 {
					t.Errorf("%d calls, outcomes %v", calls.Load(), outs.list)
				}
			})
		}
	})
}

// TestStreamedRetryableStatusReleases: a streamed response with a status
// the policy releases on still releases the key.
func TestStreamedRetryableStatusReleases(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(strings.Repeat("x", 2048)))
		})
		srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), nil), &idemhttp.Options{MaxResponseBuffer: 1024})(h))
		call{key: "k"}.send(t, srv)
		if r := (call{key: "k"}).send(t, srv); r.status != 429 || calls.Load() != 2 {
			t.Errorf("retry got %d after %d calls", r.status, calls.Load())
		}
	})
}

// TestPerRoute: each route can have its own options.
func TestPerRoute(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		e := newEngine(t, newStore(t), nil)
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "call "+strconv.FormatInt(calls.Add(1), 10))
		})
		strict := newMiddleware(t, e, &idemhttp.Options{RequireKey: true, Methods: []string{"POST", "PUT"}, LeaseDuration: time.Minute, Retention: time.Hour})
		mux := http.NewServeMux()
		mux.Handle("/strict", strict(h))
		mux.Handle("/loose", newMiddleware(t, e, nil)(h))
		srv := serve(t, mux)
		checkProblem(t, call{path: "/strict"}.send(t, srv), 400, idemhttp.CodeKeyRequired)
		if r := (call{path: "/loose"}).send(t, srv); r.status != 200 {
			t.Errorf("/loose without a key: %d", r.status)
		}
		call{path: "/strict", method: "PUT", key: "k"}.send(t, srv)
		if r := (call{path: "/strict", method: "PUT", key: "k"}).send(t, srv); r.header.Get(idemhttp.HeaderReplayed) != "true" {
			t.Error("PUT on /strict was not protected")
		}
		call{path: "/loose", method: "PUT", key: "k2"}.send(t, srv)
		if r := (call{path: "/loose", method: "PUT", key: "k2"}).send(t, srv); r.header.Get(idemhttp.HeaderReplayed) != "" {
			t.Error("PUT on /loose was protected")
		}
		rec, err := e.Get(context.Background(), store.ID{Key: "k"})
		if err != nil || rec.TTL <= 30*time.Minute || rec.TTL > time.Hour {
			t.Errorf("the route's Retention: record TTL %v, %v", rec.TTL, err)
		}
	})
}

// TestBodyHandedOnIntact: the handler reads the body the middleware read.
func TestBodyHandedOnIntact(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(w, r.Body)
		})
		srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), nil), nil)(h))
		body := `{"b": 1, "a": [true, null]}`
		for _, chunked := range []bool{false, true} {
			key := "k" + strconv.FormatBool(chunked)
			if r := (call{key: key, body: body, ct: "application/json", chunked: chunked}).send(t, srv); string(r.body) != body {
				t.Errorf("chunked=%v: the handler read %q", chunked, r.body)
			}
		}
	})
}

// TestSlowHandlerFinalizes: the bound on recording the result counts from
// the end of the handler, so a handler that ran long still has the whole
// finalize bound to store its result (a bound counted from its start
// would expire under a handler slower than it, and leave the key stuck).
// It runs in a synctest bubble, whose clock stands still while nothing
// waits: the deadline is exactly the engine's store timeout (shorter than
// FinalizeTimeout) after the handler.
func TestSlowHandlerFinalizes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		s := storekit.NewDeadlineStore(mem)
		const handlerTime = idem.FinalizeTimeout + time.Second
		returned := make(chan time.Time, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(handlerTime)
			io.WriteString(w, "done")
			returned <- time.Now()
		})
		rec := httptest.NewRecorder()
		newMiddleware(t, newEngine(t, s, nil), nil)(h).ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
		if rec.Code != 200 {
			t.Fatalf("status %d", rec.Code)
		}
		// Counted from the handler's start, the deadline would be
		// handlerTime short of this, and already past.
		want := min(idem.FinalizeTimeout, idem.DefaultStoreTimeout)
		if left := (<-s.CompleteDeadline).Sub(<-returned); left != want {
			t.Errorf("Complete had %v after the handler returned, want %v", left, want)
		}
	})
}
