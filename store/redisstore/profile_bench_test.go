package redisstore_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// serverStats is what a private server reports of its work: its CPU
// (INFO cpu) and its commands (INFO commandstats).
type serverStats struct {
	cpu   float64 // seconds, user+sys
	calls map[string]int64
	usec  map[string]int64
}

func readServerStats(b *testing.B, c *redis.Client) serverStats {
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	st := serverStats{calls: map[string]int64{}, usec: map[string]int64{}}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatal(err)
			}
			st.cpu += v
		}
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(value, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls[cmd] = n
			case "usec":
				st.usec[cmd] = n
			}
		}
	}
	return st
}

// meter adds up, over the chunks of one cycle, the wall time, the server's
// and this process's CPU, and the server's script calls and script time.
type meter struct {
	name                    string
	cycle                   cycle
	cycles                  int64
	wall                    time.Duration
	redisCPU                float64
	goCPU                   int64
	scripts, scriptUsec     int64
	sets, gets, times, cmds int64
	idle                    float64 // the machine's idle CPU, seconds
}

// machineIdle returns the idle CPU seconds of the whole machine (all
// cores) from /proc/stat, or 0 where there is none.
func machineIdle() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait ...
	if len(f) < 5 {
		return 0
	}
	idle, _ := strconv.ParseFloat(f[4], 64)
	return idle / 100 // USER_HZ
}

func (m *meter) run(b *testing.B, admin *redis.Client, n int, next *atomic.Int64) {
	s0, g0, i0, t0 := readServerStats(b, admin), testenv.ProcessCPU(b), machineIdle(), time.Now()
	if err := storekit.Run(benchWorkers, n, next, m.cycle); err != nil {
		b.Fatal(err)
	}
	wall, i1, g1, s1 := time.Since(t0), machineIdle(), testenv.ProcessCPU(b), readServerStats(b, admin)
	m.idle += i1 - i0
	m.cycles += int64(n)
	m.wall += wall
	m.goCPU += int64(g1 - g0)
	m.redisCPU += s1.cpu - s0.cpu
	m.scripts += s1.calls["evalsha"] - s0.calls["evalsha"]
	m.scriptUsec += s1.usec["evalsha"] - s0.usec["evalsha"]
	m.sets += s1.calls["set"] - s0.calls["set"]
	m.gets += s1.calls["get"] - s0.calls["get"]
	m.times += s1.calls["time"] - s0.calls["time"]
	for cmd, calls := range s1.calls {
		if cmd != "info" {
			m.cmds += calls - s0.calls[cmd]
		}
	}
}

func (m *meter) report(b *testing.B, prefix string) {
	n := float64(m.cycles)
	wall := float64(m.wall.Nanoseconds())
	b.ReportMetric(wall/n, prefix+"wall-ns/cycle")
	b.ReportMetric(m.redisCPU*1e9/n, prefix+"redis-cpu-ns/cycle")
	b.ReportMetric(float64(m.goCPU)/n, prefix+"go-cpu-ns/cycle")
	b.ReportMetric(m.redisCPU*1e9/wall, prefix+"redis-busy")
	b.ReportMetric(float64(m.goCPU)/wall, prefix+"go-cores")
	b.ReportMetric(float64(m.scriptUsec)*1e3/n, prefix+"script-ns/cycle")
	b.ReportMetric(float64(m.cmds)/n, prefix+"cmds/cycle")
	b.ReportMetric(m.idle*1e9/wall, prefix+"idle-cores")
}

// BenchmarkCoalesceProfile explains the engine-coalesce rows of
// BenchmarkCycle on rueidis: on a private redis-server, it runs the naive
// cycle, the plain engine and the coalescing engine interleaved in chunks
// (64 goroutines), and reports for each, per cycle, the wall time, the
// server's CPU (INFO cpu), this process's CPU (getrusage), the server's
// time inside scripts (INFO commandstats, EVALSHA usec: the batch script
// and the lone operations' scripts), the commands the server ran, and how
// busy the server thread (redis-busy, in cores) and this process
// (go-cores) were, and how much of the machine's CPU stayed idle
// (idle-cores, from /proc/stat: all cores, other processes included). The coalescing engine's figures have no prefix; the
// ratios x_naive and x_engine are the baselines' wall time over its.
func BenchmarkCoalesceProfile(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a redis-server")
	}
	srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Kill()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	rd, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: true})
	defer gr.Close()

	engineOn := func(s *redisstore.Store, err error) cycle {
		if err != nil {
			b.Fatal(err)
		}
		e, err := idem.New(s, &idem.Options{LeaseDuration: naiveLock, Retention: naiveRetention})
		if err != nil {
			b.Fatal(err)
		}
		return engineCycle(e)
	}
	rueidisNaive := func(ctx context.Context, i int64) error {
		key := "naive:" + strconv.FormatInt(i, 10)
		if err := rd.Do(ctx, rd.B().Set().Key(key).Value("LOCKED").Nx().Px(naiveLock).Build()).Error(); err != nil {
			return err
		}
		return rd.Do(ctx, rd.B().Set().Key("response:"+key).Value(rueidis.BinaryString(benchBody)).Px(naiveRetention).Build()).Error()
	}
	for _, c := range []struct {
		name     string
		newStore func(prefix string, co bool) (*redisstore.Store, error)
		naive    cycle
	}{
		{"rueidis", func(prefix string, co bool) (*redisstore.Store, error) {
			return redisstore.NewRueidis(rd, &redisstore.Options{Prefix: prefix, Coalesce: co})
		}, rueidisNaive},
		{"go-redis", func(prefix string, co bool) (*redisstore.Store, error) {
			return redisstore.New(gr, &redisstore.Options{Prefix: prefix, Coalesce: co})
		}, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := admin.FlushAll(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			co, err := c.newStore("co:", true)
			coCycle := engineOn(co, err)
			measured := &meter{name: "", cycle: coCycle}
			meters := []*meter{{name: "engine_", cycle: engineOn(c.newStore("plain:", false))}}
			if c.naive != nil {
				meters = append(meters, &meter{name: "naive_", cycle: c.naive})
			}
			st0, _ := co.CoalesceStats()
			var next atomic.Int64
			b.ResetTimer()
			for done, round := 0, 0; done < b.N; round++ {
				n := min(benchChunk, b.N-done)
				runBase := func() {
					b.StopTimer()
					for _, m := range meters {
						m.run(b, admin, n, &next)
					}
					b.StartTimer()
				}
				if round%2 == 0 {
					runBase()
				}
				measured.run(b, admin, n, &next)
				if round%2 == 1 {
					runBase()
				}
				done += n
			}
			b.StopTimer()
			st, _ := co.CoalesceStats()
			measured.report(b, "")
			for _, m := range meters {
				m.report(b, m.name)
				b.ReportMetric(float64(m.wall)/float64(measured.wall), "x_"+strings.TrimSuffix(m.name, "_"))
			}
			if batches := st.Batches - st0.Batches; batches > 0 {
				carried := st.Carried - st0.Carried
				ops := carried + st.Single - st0.Single
				b.ReportMetric(float64(carried)/float64(batches), "ops/batch")
				b.ReportMetric(float64(measured.scriptUsec)*1e3/float64(ops), "script-ns/op")
			}
		})
	}
}
