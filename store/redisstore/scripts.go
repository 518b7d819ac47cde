package redisstore

import (
	"context"
	_ "embed"
	"regexp"
	"strings"

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

// withRecord puts record.lua's functions that src calls in front of it: a
// script cannot load another, and EVALSHA takes the SHA of the source as
// sent. Only those it calls, directly or through another: every function
// defined is a closure Redis makes on each call, and the 15 of record.lua
// measured 2-3 µs of the 23-26 µs an acquire or a complete costs in Redis
// (issue 35). A name that only shows in a comment or a string still takes
// its function in, which costs a closure and nothing else.
func withRecord(src string) string {
	need := make([]bool, len(recordFuncs))
	text := src
	for found := true; found; {
		found = false
		for i, f := range recordFuncs {
			if !need[i] && f.called.MatchString(text) {
				need[i], found = true, true
				text += f.src
			}
		}
	}
	var b strings.Builder
	b.WriteString(recordHead)
	for i, f := range recordFuncs {
		if need[i] {
			b.WriteString(f.src)
		}
	}
	b.WriteString(src)
	return b.String()
}

// recordFunc is one function of record.lua, with the comment lines in
// front of it.
type recordFunc struct {
	name   string
	src    string
	called *regexp.Regexp // the name as a word
}

// recordHead is record.lua's comments before its first function, and
// recordFuncs its functions in their order, which withRecord keeps: a
// function calls only those defined before it. record.lua holds nothing
// else: at the start of a line, only comments, a function's first line
// and its closing end.
var recordHead, recordFuncs = func() (string, []recordFunc) {
	var head, pending strings.Builder // pending: the comments since the last function
	var funcs []recordFunc
	for line := range strings.Lines(recordLua) {
		switch {
		case strings.HasPrefix(line, "--"), strings.TrimSpace(line) == "":
			pending.WriteString(line)
		case strings.HasPrefix(line, "local function "):
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "local function "), "(")
			if !ok || strings.Contains(name, " ") {
				panic("redisstore: record.lua: a function line without its name and '(': " + line)
			}
			if len(funcs) == 0 {
				head.WriteString(pending.String())
				pending.Reset()
			}
			funcs = append(funcs, recordFunc{name: name, src: pending.String() + line,
				called: regexp.MustCompile(`\b` + name + `\b`)})
			pending.Reset()
		case len(funcs) > 0 && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "end")):
			funcs[len(funcs)-1].src += pending.String() + line
			pending.Reset()
		default:
			panic("redisstore: record.lua: a line outside its functions that is not a comment: " + line)
		}
	}
	return head.String(), funcs
}()

// script is one Lua script, run by EVALSHA with a fallback to EVAL when
// the server does not know it yet (NOSCRIPT).
type script struct {
	name    string // its name as a Redis function (Options.Functions): lib_name
	body    string // the script without record.lua
	src     string // the script as EVALSHA runs it
	goredis *redis.Script
	op      string // its number in a batch (batch.lua's OPS); "" when a batch cannot carry it
}

func newScript(name, body string) *script {
	src := withRecord(body)
	return &script{name: name, body: body, src: src, goredis: redis.NewScript(src)}
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
