package redisstore_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/recordcodec"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/rueidis"
)

// BenchmarkFCALL measures the store's acquire+complete cycle run as Redis
// 7 functions (FCALL) against the same two scripts by EVALSHA, on one
// rueidis client, 64 goroutines, interleaved in the same run: x_evalsha
// above 1 would mean FCALL is faster. The store keeps EVALSHA (see
// docs/benchmarks.md for the figures).
//
//	go test -run '^$' -bench FCALL -benchtime 40000x ./store/redisstore/
func BenchmarkFCALL(b *testing.B) {
	c := rueidisClient(b)
	ctx := context.Background()
	lib := "idembench" + strings.ToLower(rand.Text()[:8])
	if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(redisstore.FunctionLibrary(lib)).Build()).Error(); err != nil {
		b.Fatalf("FUNCTION LOAD: %v", err)
	}
	b.Cleanup(func() { c.Do(ctx, c.B().FunctionDelete().LibraryName(lib).Build()) })
	prefix := testenv.Prefix(b)
	header := string(recordcodec.AppendHeader(nil, benchHeader))
	grace := strconv.FormatInt(redisstore.FenceGraceMs, 10)
	acquireArgs := func(owner string) []string {
		return []string{owner, "fp", "30000", "86400000", grace, "0"}
	}
	completeArgs := func(owner, fence string) []string {
		return []string{owner, fence, "86400000", "200", header, string(benchBody), grace}
	}
	keys := func(i int64) []string {
		return []string{prefix + "{k" + strconv.FormatInt(i, 10) + "}", prefix + "unknown"}
	}
	fenceOf := func(s string) string { f, _, _ := strings.Cut(s, ":"); return f }

	acquireLua, completeLua := rueidis.NewLuaScript(redisstore.AcquireSource), rueidis.NewLuaScript(redisstore.CompleteSource)
	evalsha := func(ctx context.Context, i int64) error {
		k, owner := keys(i), "o"+strconv.FormatInt(i, 10)
		got, err := acquireLua.Exec(ctx, c, k, acquireArgs(owner)).ToString()
		if err != nil {
			return err
		}
		return completeLua.Exec(ctx, c, k, completeArgs(owner, fenceOf(got))).Error()
	}
	fcall := func(ctx context.Context, i int64) error {
		k, owner := keys(i), "o"+strconv.FormatInt(i, 10)
		got, err := c.Do(ctx, c.B().Fcall().Function(lib+"_acquire").Numkeys(2).Key(k...).Arg(acquireArgs(owner)...).Build()).ToString()
		if err != nil {
			return err
		}
		return c.Do(ctx, c.B().Fcall().Function(lib+"_complete").Numkeys(2).Key(k...).Arg(completeArgs(owner, fenceOf(got))...).Build()).Error()
	}
	if err := fcall(ctx, -1); err != nil {
		b.Fatal(err)
	}
	compare(b, fcall, baseline{"evalsha", evalsha})
}
