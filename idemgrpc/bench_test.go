package idemgrpc_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/testinfra/storekit"
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

// benchPair makes b.N timed calls on conn (with the keys key gives) and
// as many untimed on bare, batch by batch (storekit.Compare), and reports
// x-bare, the ratio of their times.
func benchPair(b *testing.B, bare, conn *grpc.ClientConn, key func(int64) string) {
	const batch, clients = 40, 4
	in := wrapperspb.String("100 EUR")
	call := func(conn *grpc.ClientConn, key func(int64) string) storekit.Call {
		return func(ctx context.Context, i int64) error {
			if key != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key(i))
			}
			out := new(wrapperspb.StringValue)
			if err := conn.Invoke(ctx, chargeMethod, in, out); err != nil || out.GetValue() != "paid 100 EUR" {
				return fmt.Errorf("%q, %v", out.GetValue(), err)
			}
			return nil
		}
	}
	protected, unprotected := call(conn, key), call(bare, nil)
	if err := protected(context.Background(), -1); err != nil { // the replay's first execution, alone
		b.Fatal(err)
	}
	for i := range batch { // warm both servers and the connections
		unprotected(context.Background(), 0)
		protected(context.Background(), int64(-2-i))
	}
	b.ReportAllocs()
	storekit.Compare(b, storekit.Pace{Workers: clients, Chunk: batch}, protected,
		storekit.Baseline{Name: "bare", Ratio: "x-bare", Call: unprotected})
}

// BenchmarkDuplicateOfSlowCall: a duplicate sent while the first call of a
// 50ms method runs, the key found in flight. "pushback": a gRPC service
// config retry policy retries ABORTED after the server's pushback trailer
// (the method's measured duration); "wait": the server's Options.Wait
// attaches the duplicate to the running call. It reports the median
// latency of the duplicate in milliseconds (dup-ms): the goal is
// at most 100.
func BenchmarkDuplicateOfSlowCall(b *testing.B) {
	const slow = 50 * time.Millisecond
	const config = `{"methodConfig": [{"name": [{"service": "idemtest.Payments"}], "retryPolicy": {
		"maxAttempts": 5, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["ABORTED"]}}]}`
	for _, mode := range []string{"pushback", "wait"} {
		b.Run(mode, func(b *testing.B) {
			st := newFaultStore(memStore(b), make(chan struct{}, 1))
			svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				time.Sleep(slow) // the method's work
				return pay(ctx, in)
			}}
			o := &idemgrpc.Options{AllowAnonymous: true}
			if mode == "wait" {
				o.Wait = 10 * time.Second
			}
			conn := serve(b, newEngine(b, st, nil), o, svc, grpc.WithDefaultServiceConfig(config))
			ctx := context.Background()
			if _, _, err := charge(ctx, conn, "warm-up", "1"); err != nil { // the method's duration is known
				b.Fatal(err)
			}
			<-st.acquired
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				key := "dup-" + strconv.Itoa(i)
				first := make(chan error, 1)
				go func() { _, _, err := charge(ctx, conn, key, "2"); first <- err }()
				<-st.acquired // the first call runs
				start := time.Now()
				got, _, err := charge(ctx, conn, key, "2")
				lat = append(lat, time.Since(start))
				if err != nil || got != "paid 2" {
					b.Fatalf("duplicate: %q, %v", got, err)
				}
				if err := <-first; err != nil {
					b.Fatal(err)
				}
				for len(st.acquired) > 0 { // the duplicate's own acquires
					<-st.acquired
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "dup-ms")
		})
	}
}
