package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// rueidisScripts holds the rueidis form of each script. rueidis.Lua runs
// EVALSHA and falls back to EVAL on NOSCRIPT, like redis.Script.
var rueidisScripts = map[*script]*rueidis.Lua{
	acquireScript:  rueidis.NewLuaScript(acquireLua),
	completeScript: rueidis.NewLuaScript(completeLua),
	extendScript:   rueidis.NewLuaScript(extendLua),
	releaseScript:  rueidis.NewLuaScript(releaseLua),
	getScript:      rueidis.NewLuaScript(getLua),
	deleteScript:   rueidis.NewLuaScript(deleteLua),
}

type rueidisRunner struct{ c rueidis.Client }

func (r rueidisRunner) run(ctx context.Context, s *script, keys []string, args []any) ([]string, error) {
	strs := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case string:
			strs[i] = a
		case []byte:
			// A copy, not rueidis.BinaryString: a command whose context
			// ends may still sit in the pipeline after run returns, while
			// the caller already reuses the bytes.
			strs[i] = string(a)
		case int:
			strs[i] = strconv.Itoa(a)
		case int64:
			strs[i] = strconv.FormatInt(a, 10)
		default:
			return nil, fmt.Errorf("redisstore: script argument of type %T", a)
		}
	}
	return rueidisScripts[s].Exec(ctx, r.c, keys, strs).AsStrSlice()
}

// NewRueidis returns a store on a rueidis client: a single node, Sentinel
// or Cluster client. rueidis pipelines concurrent calls on a few
// connections (auto-pipelining), which makes it the faster client under
// concurrency; see docs/benchmarks.md.
func NewRueidis(client rueidis.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	return newStore(rueidisRunner{client}, opts)
}
