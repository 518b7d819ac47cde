package redisstore

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// batchLuaOps is the operations of one batch in BenchmarkBatchLua: about
// the mean batch of BenchmarkCycle's engine-coalesce rows on rueidis.
const batchLuaOps = 32

// scriptTime returns the server's EVALSHA calls, the microseconds it spent
// in them (INFO commandstats) and its CPU seconds (INFO cpu).
func scriptTime(b *testing.B, c *redis.Client) (calls, usec int64, cpu float64) {
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			v, _ := strconv.ParseFloat(value, 64)
			cpu += v
		case "cmdstat_evalsha":
			for field := range strings.SplitSeq(value, ",") {
				k, v, _ := strings.Cut(field, "=")
				switch k {
				case "calls":
					calls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					usec, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	return calls, usec, cpu
}

// mustReplace replaces old by new in s, once, and fails when old is absent.
func mustReplace(b *testing.B, s, old, new string) string {
	if !strings.Contains(s, old) {
		b.Fatalf("variant: %q not in the script", old)
	}
	return strings.Replace(s, old, new, 1)
}

// BenchmarkBatchLua measures what an operation costs inside Redis when a
// batch carries it, and what each part of batch.lua costs: it runs, on a
// private server and one connection (so the server thread is not
// preempted by the clients), batches of batchLuaOps acquires of new keys
// followed by batches of as many completes of those keys, with batch.lua
// as shipped, as it was before it read the clock once per batch
// (time-per-op), and with throwaway copies that leave a piece out, each
// interleaved with the shipped batch (x_batch). It reports
// the EVALSHA time per operation (script-ns/op, INFO commandstats) and the
// server's CPU per operation (redis-cpu-ns/op), and the same for the
// operations run by their own scripts (single).
func BenchmarkBatchLua(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a redis-server")
	}
	srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Kill()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	defer c.Close()
	ctx := context.Background()

	src := batchScript.src
	const call = "local ok, res = pcall(op, {unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a + 3, a + 2 + na)})"
	noPcall := mustReplace(b, src, call, "local ok, res = true, op({unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a + 3, a + 2 + na)})")
	reuse := "local K, A = {}, {}\n" + mustReplace(b, src, call,
		"for i = 1, nk do K[i] = KEYS[k + i - 1] end\n  for i = 1, na do A[i] = ARGV[a + 2 + i] end\n  local ok, res = pcall(op, K, A)")
	// Before the batch read the clock once: each operation reads TIME.
	timePerOp := mustReplace(b, src, batchClock, "")
	// Neither pcall nor a table per operation: the rest of what an
	// operation costs is its own script's work.
	bare := "local K, A = {}, {}\n" + mustReplace(b, src, call,
		"for i = 1, nk do K[i] = KEYS[k + i - 1] end\n  for i = 1, na do A[i] = ARGV[a + 2 + i] end\n  local ok, res = true, op(K, A)")

	header := string(encodeHeader(http.Header{"Content-Type": {"application/json"}}))
	body := `{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1099,"currency":"usd","status":"succeeded"}`
	const lease, retention = "30000", "86400000"
	grace := strconv.FormatInt(fenceGraceMs, 10)
	idx := "p:idx"
	next := 0
	key := func(i int) string { s := strconv.Itoa(i); return "p:{" + strconv.Itoa(len(s)+2) + ":b:" + s + "}" }

	// batches runs n operations (acquires then completes, batchLuaOps at
	// a time) through the batch script sc.
	batches := func(b *testing.B, sc *redis.Script, n int) {
		for done := 0; done < n; done += 2 * batchLuaOps {
			first := next
			next += batchLuaOps
			var keys []string
			var args []any
			for i := first; i < next; i++ {
				keys = append(keys, key(i), idx, key(i)+tombstoneSuffix)
				args = append(args, "1", "3", "7", "owner", "fp", lease, retention, grace, "0", "")
			}
			v, err := sc.Run(ctx, c, keys, args...).Slice()
			if err != nil {
				b.Fatal(err)
			}
			args = args[:0]
			for _, r := range v {
				fence, _, _ := strings.Cut(r.(string), ":")
				args = append(args, "2", "3", "8", "owner", fence, retention, "201", header, body, grace, "0")
			}
			v, err = sc.Run(ctx, c, keys, args...).Slice()
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range v {
				if r != int64(1) {
					b.Fatalf("complete: %v", r)
				}
			}
		}
	}
	singles := func(b *testing.B, n int) {
		acq, com := acquireScript.goredis, completeScript.goredis
		for done := 0; done < n; done += 2 {
			k := []string{key(next), idx, key(next) + tombstoneSuffix}
			next++
			r, err := acq.Run(ctx, c, k, "owner", "fp", lease, retention, grace, "0", "").Text()
			if err != nil {
				b.Fatal(err)
			}
			fence, _, _ := strings.Cut(r, ":")
			if n, err := com.Run(ctx, c, k, "owner", fence, retention, "201", header, body, grace, "0").Int(); err != nil || n != 1 {
				b.Fatal(n, err)
			}
		}
	}
	// measured adds up a run's operations, script time and server CPU.
	type measured struct {
		ops, usec int64
		cpu       float64
	}
	measure := func(b *testing.B, m *measured, n int, run func(b *testing.B, n int)) {
		_, usec0, cpu0 := scriptTime(b, c)
		run(b, n)
		_, usec, cpu := scriptTime(b, c)
		m.ops += int64(n)
		m.usec += usec - usec0
		m.cpu += cpu - cpu0
	}
	script := func(src string) func(b *testing.B, n int) {
		sc := redis.NewScript(src)
		return func(b *testing.B, n int) { batches(b, sc, n) }
	}
	shipped := script(src)
	// Each variant runs interleaved with the shipped batch, in chunks of
	// 16 batches, and x_batch is the shipped batch's script time per
	// operation over the variant's: above 1, the variant is cheaper.
	const chunk = 32 * batchLuaOps
	for _, v := range []struct {
		name string
		run  func(b *testing.B, n int)
	}{
		{"single", singles},
		{"batch", shipped},
		{"batch-nopcall", script(noPcall)},
		{"batch-reuse-tables", script(reuse)},
		{"batch-time-per-op", script(timePerOp)},
		{"batch-bare", script(bare)},
	} {
		b.Run(v.name, func(b *testing.B) {
			var m, base measured
			measure(b, &base, 2*batchLuaOps, shipped) // loads the scripts
			measure(b, &m, 2*batchLuaOps, v.run)
			m, base = measured{}, measured{}
			b.ResetTimer()
			for round := 0; m.ops < int64(b.N); round++ {
				n := min(chunk, b.N-int(m.ops))
				n = (n + 2*batchLuaOps - 1) / (2 * batchLuaOps) * (2 * batchLuaOps) // whole batches
				if round%2 == 0 {
					measure(b, &m, n, v.run)
					measure(b, &base, n, shipped)
				} else {
					measure(b, &base, n, shipped)
					measure(b, &m, n, v.run)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(m.usec)*1e3/float64(m.ops), "script-ns/op")
			b.ReportMetric(m.cpu*1e9/float64(m.ops), "redis-cpu-ns/op")
			b.ReportMetric(float64(base.usec)*1e3/float64(base.ops), "batch-script-ns/op")
			b.ReportMetric(float64(base.usec)/float64(m.usec), "x_batch")
		})
	}
}

// BenchmarkLuaPieces measures, on a private server, what the parts of an
// operation's script cost inside Redis: each piece runs 1000 times in one
// script, and ns/piece is the EVALSHA time (INFO commandstats) per run of
// the piece, the loop included (empty-loop).
func BenchmarkLuaPieces(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a redis-server")
	}
	srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Kill()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	defer c.Close()
	ctx := context.Background()
	header := string(encodeHeader(http.Header{"Content-Type": {"application/json"}}))
	body := `{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1099,"currency":"usd","status":"succeeded"}`
	grace := strconv.FormatInt(fenceGraceMs, 10)
	idx := "p:idx"
	pieces := []struct{ name, body string }{
		{"empty-loop", ``},
		{"time", `redis.call('TIME')`},
		{"clock", `clock()`},
		{"unpack-tables", `local x, y = {unpack(KEYS, 1, 2)}, {unpack(ARGV, 1, 7)}`},
		{"pcall", `pcall(f)`},
		{"pack_p", `pack_p('1712345678123456', ARGV[1], ARGV[2], 1712345678123, 1712345708123, 1712432078123, '')`},
		{"decode_p", `decode(P)`},
		{"pack_c", `pack_c(R, 1712432078123, 1712345678200, 201, ARGV[5], ARGV[6])`},
		{"fence-digits", `local t = {'1712345678', '123456'}; local us = string.format('%06d', tonumber(t[2])); local f = t[1] .. us`},
		{"set-px", `redis.call('SET', KEYS[1], ARGV[6], 'PX', 86400000)`},
		{"get", `redis.call('GET', KEYS[1])`},
	}
	for _, p := range pieces {
		b.Run("piece/"+p.name, func(b *testing.B) {
			sc := redis.NewScript(recordLua + `
local function f() end
local P = pack_p('1712345678123456', 'owner', 'fp', 1712345678123, 1712345708123, 1712432078123, '')
local R = decode(P)
for i = 1, 1000 do
` + p.body + `
end
return 1`)
			args := []any{"owner", "fp", "30000", "86400000", header, body, grace}
			if err := sc.Run(ctx, c, []string{"piece", idx}, args...).Err(); err != nil {
				b.Fatal(fmt.Errorf("%s: %w", p.name, err))
			}
			_, usec0, _ := scriptTime(b, c)
			b.ResetTimer()
			for range b.N {
				if err := sc.Run(ctx, c, []string{"piece", idx}, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_, usec, _ := scriptTime(b, c)
			b.ReportMetric(float64(usec-usec0)/float64(b.N), "ns/piece") // usec per 1000 pieces = ns per piece
		})
	}
}
