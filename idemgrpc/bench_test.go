package idemgrpc_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// BenchmarkInterceptor serves the test method over loopback TCP, bare and
// behind the server interceptor on the in-memory store and on Redis, with
// a unique key per call (every call runs the handler) and with one key
// (every call is a replay), and bare with a unique key sent per call
// (what the key costs on the wire alone).
//
// Each interceptor case alternates batches of calls to the bare server
// (untimed) and to the protected one (timed), so both see the same load
// on a shared machine, and reports x-bare: its calls per second as a
// fraction of the bare server's (1.0 = no cost). ns/op and allocs/op are
// the protected calls', client and server together.
func BenchmarkInterceptor(b *testing.B) {
	stores := []struct {
		name string
		new  func(b *testing.B) store.Store
	}{
		{"memory", func(b *testing.B) store.Store { return memStore(b) }},
		{"redis", func(b *testing.B) store.Store {
			s, err := redisstore.New(testenv.Redis(b), &redisstore.Options{Prefix: testenv.Prefix(b)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	// The protocol's own cost: a bare server sent a unique key per call,
	// which hpack cannot index, and nothing reads it.
	b.Run("bare-with-key", func(b *testing.B) {
		benchPair(b, serve(b, nil, nil, &service{}), serve(b, nil, nil, &service{}),
			func(i int64) string { return "k" + strconv.FormatInt(i, 10) })
	})
	for _, st := range stores {
		for _, mode := range []string{"unique", "replay"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				bare := serve(b, nil, nil, &service{})
				conn := serve(b, newEngine(b, st.new(b), &idem.Options{Retention: time.Minute}), nil, &service{})
				key := func(i int64) string { return "k" + strconv.FormatInt(i, 10) }
				if mode == "replay" {
					key = func(int64) string { return "same" }
				}
				benchPair(b, bare, conn, key)
			})
		}
	}
}

// benchPair makes b.N timed calls on conn (with the keys key gives), each
// batch after an untimed batch of as many on bare, and reports the ratio
// of their times.
func benchPair(b *testing.B, bare, conn *grpc.ClientConn, key func(int64) string) {
	const batch, clients = 40, 4
	ctx := context.Background()
	in := wrapperspb.String("100 EUR")
	send := func(conn *grpc.ClientConn, k string) {
		ctx := ctx
		if k != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, k)
		}
		out := new(wrapperspb.StringValue)
		if err := conn.Invoke(ctx, chargeMethod, in, out); err != nil || out.GetValue() != "paid 100 EUR" {
			b.Errorf("%q, %v", out.GetValue(), err)
		}
	}
	var seq atomic.Int64
	run := func(conn *grpc.ClientConn, n int, key func(int64) string) time.Duration {
		start := time.Now()
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					k := ""
					if key != nil {
						k = key(seq.Add(1))
					}
					send(conn, k)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	send(conn, key(0)) // the replay's first execution, alone
	run(bare, batch, nil)
	run(conn, batch, key)
	var bareTime, time time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		b.StopTimer()
		bareTime += run(bare, n, nil)
		b.StartTimer()
		time += run(conn, n, key)
	}
	b.StopTimer()
	b.ReportMetric(float64(bareTime)/float64(time), "x-bare")
}
