package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// rueidisScripts holds the rueidis form of each script. rueidis.Lua runs
// EVALSHA and falls back to EVAL on NOSCRIPT, like redis.Script.
var rueidisScripts = func() map[*script]*rueidis.Lua {
	m := map[*script]*rueidis.Lua{}
	for _, s := range allScripts {
		m[s] = rueidis.NewLuaScript(s.src)
	}
	return m
}()

type rueidisRunner struct {
	c  rueidis.Client
	fn *functions // nil: EVALSHA
}

func (r rueidisRunner) run(ctx context.Context, s *script, keys []string, args []any) (reply, error) {
	msg, err := r.exec(ctx, s, keys, args)
	if rueidis.IsRedisNil(err) {
		return reply{kind: replyNil}, nil
	}
	if err != nil {
		return reply{}, err
	}
	return rueidisReply(msg)
}

// exec runs s by EVALSHA, or FCALL with Options.Functions.
func (r rueidisRunner) exec(ctx context.Context, s *script, keys []string, args []any) (rueidis.RedisMessage, error) {
	strs, err := rueidisArgs(args)
	if err != nil {
		return rueidis.RedisMessage{}, err
	}
	if r.fn != nil {
		return r.fn.call(ctx, r.c, s, keys, strs)
	}
	return rueidisScripts[s].Exec(ctx, r.c, keys, strs).ToMessage()
}

func (r rueidisRunner) runBatch(ctx context.Context, keys []string, args []any) ([]answer, error) {
	msg, err := r.exec(ctx, batchScript, keys, args)
	if err != nil {
		return nil, err
	}
	elems, err := msg.ToArray()
	if err != nil {
		return nil, fmt.Errorf("redisstore: batch reply: %w", err)
	}
	out := make([]answer, len(elems))
	for i, e := range elems {
		switch err := e.Error(); {
		case rueidis.IsRedisNil(err): // a Lua false
			out[i].r.kind = replyNil
		case err != nil: // that operation's script raised an error
			out[i].err = err
		default:
			out[i].r, out[i].err = rueidisReply(e)
		}
	}
	return out, nil
}

func (r rueidisRunner) rangeByLex(ctx context.Context, keys, mins []string, max string, count int) ([][]string, error) {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = r.c.B().Zrangebylex().Key(k).Min(mins[i]).Max(max).Limit(0, int64(count)).Build()
	}
	out := make([][]string, len(keys))
	for i, res := range r.c.DoMulti(ctx, cmds...) {
		var err error
		if out[i], err = res.AsStrSlice(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rueidisReply converts a parsed script reply. The strings it returns are
// the message's own, not copies.
func rueidisReply(msg rueidis.RedisMessage) (reply, error) {
	switch {
	case msg.IsInt64():
		n, err := msg.AsInt64()
		return reply{kind: replyInt, num: n}, err
	case msg.IsString():
		str, err := msg.ToString()
		return reply{kind: replyStr, str: str}, err
	case msg.IsArray():
		elems, err := msg.ToArray()
		if err != nil {
			return reply{}, err
		}
		fields := make([]string, len(elems))
		for i, e := range elems {
			if fields[i], err = e.ToString(); err != nil {
				return reply{}, fmt.Errorf("redisstore: reply field %d: %w", i, err)
			}
		}
		return reply{kind: replyArray, fields: fields}, nil
	}
	return reply{}, fmt.Errorf("redisstore: unexpected reply %s", msg.String())
}

// maxScriptArgs is the most arguments a transition's script takes
// (resolve.lua); list.lua takes more, and pays an allocation for them.
const maxScriptArgs = 8

// rueidisArgs formats a script's arguments as strings, all cut from one
// new string: one allocation for all of them. []byte values are copied,
// not passed as rueidis.BinaryString: a command whose context ends may
// still sit in the pipeline after run returns, while the caller already
// reuses the bytes.
func rueidisArgs(args []any) ([]string, error) {
	size := 0
	for _, a := range args {
		switch a := a.(type) {
		case string:
			size += len(a)
		case []byte:
			size += len(a)
		default:
			size += 20 // the digits of an int64
		}
	}
	var b strings.Builder
	b.Grow(size)
	var endsBuf [maxScriptArgs]int
	ends := endsBuf[:0]
	var digits [20]byte
	for _, a := range args {
		switch a := a.(type) {
		case string:
			b.WriteString(a)
		case []byte:
			b.Write(a)
		case int:
			b.Write(strconv.AppendInt(digits[:0], int64(a), 10))
		case int64:
			b.Write(strconv.AppendInt(digits[:0], a, 10))
		default:
			return nil, fmt.Errorf("redisstore: script argument of type %T", a)
		}
		ends = append(ends, b.Len())
	}
	all := b.String()
	strs := make([]string, len(args))
	start := 0
	for i := range strs {
		strs[i] = all[start:ends[i]]
		start = ends[i]
	}
	return strs, nil
}

// NewRueidis returns a store on a rueidis client: a single node, Sentinel
// or Cluster client. rueidis pipelines concurrent calls on a few
// connections (auto-pipelining), which makes it the faster client under
// concurrency; see docs/benchmarks.md.
func NewRueidis(client rueidis.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if opts != nil && opts.ReplicaAcks > 0 {
		// WAIT must run on the connection that ran the script, which a
		// pipelining client does not pin.
		return nil, errors.New("redisstore: ReplicaAcks needs a go-redis client (New); rueidis pipelines commands of many callers on one connection")
	}
	mode := indexSingle
	if client.Mode() == rueidis.ClientModeCluster {
		mode = indexPerSlot
	}
	r := rueidisRunner{c: client}
	if opts != nil && opts.Functions {
		r.fn = libraryFunctions
	}
	s, err := newStore(r, mode, opts)
	if err != nil {
		return nil, err
	}
	s.info = rueidisInfo(client)
	if opts != nil && opts.NearCache {
		s.near = newNearCache(client)
	}
	return s, nil
}
