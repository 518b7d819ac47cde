package redisstore

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// recordLua is the encoding of a record, shared by every script; it
	// goes in front of each (see withRecord).
	//go:embed record.lua
	recordLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed complete.lua
	completeLua string
	//go:embed extend.lua
	extendLua string
	//go:embed release.lua
	releaseLua string
	//go:embed markunknown.lua
	markUnknownLua string
	//go:embed claim.lua
	claimLua string
	//go:embed resolve.lua
	resolveLua string
	//go:embed get.lua
	getLua string
	//go:embed delete.lua
	deleteLua string
	//go:embed list.lua
	listLua string
)

// withRecord puts record.lua in front of a script: a script cannot load
// another, and EVALSHA takes the SHA of the source as sent.
func withRecord(src string) string { return recordLua + src }

// script is one Lua script, run by EVALSHA with a fallback to EVAL when
// the server does not know it yet (NOSCRIPT).
type script struct {
	name    string // its name as a Redis function (Options.Functions): lib_name
	body    string // the script without record.lua
	src     string // the script as EVALSHA runs it
	goredis *redis.Script
	sha     any // goredis.Hash() as a command argument, boxed once
	op      any // its number in a batch (batch.lua's OPS), a string boxed once; nil when a batch cannot carry it
}

func newScript(name, body string) *script {
	src := withRecord(body)
	gs := redis.NewScript(src)
	return &script{name: name, body: body, src: src, goredis: gs, sha: gs.Hash()}
}

var (
	acquireScript     = newScript("acquire", acquireLua)
	completeScript    = newScript("complete", completeLua)
	extendScript      = newScript("extend", extendLua)
	releaseScript     = newScript("release", releaseLua)
	markUnknownScript = newScript("mark_unknown", markUnknownLua)
	claimScript       = newScript("claim", claimLua)
	resolveScript     = newScript("resolve", resolveLua)
	getScript         = newScript("get", getLua)
	deleteScript      = newScript("delete", deleteLua)
	listScript        = newScript("list", listLua)

	allScripts = []*script{acquireScript, completeScript, extendScript, releaseScript, markUnknownScript,
		claimScript, resolveScript, getScript, deleteScript, listScript, batchScript}
)

// reply is what a script answered, in the three shapes the scripts use:
// an integer (transitions), a string (an acquisition) or an array of
// strings (a record). Each client library parses its own replies into it
// without going through an intermediate []any or []string.
type reply struct {
	kind   replyKind
	num    int64
	str    string
	fields []string
}

type replyKind uint8

const (
	replyNil replyKind = iota // a Lua false or nil
	replyInt
	replyStr
	replyArray
)

// runner runs a script atomically and returns its reply, and reads the
// index of unsettled records. Each Redis client library has one.
type runner interface {
	run(ctx context.Context, s *script, keys []string, args []any) (reply, error)
	// rangeByLex returns, for each key, up to count members of that
	// sorted set from mins[i] to max (ZRANGEBYLEX), in one pipeline.
	rangeByLex(ctx context.Context, keys, mins []string, max string, count int) ([][]string, error)
}
