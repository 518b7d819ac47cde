package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A script call is sent at most once. go-redis re-sends a command whose
// connection failed (an EOF, a reset: MaxRetries for a single server,
// MaxRedirects on a cluster), but a script whose reply was lost may have
// run, and its second run answers for the state the first one left: a
// Release that succeeded reports ErrLeaseLost, a Resolve ErrNotUnknown, a
// Delete that there was no record. The store answers such a call with the
// connection's error instead (the outcome is unknown), and the engine,
// which knows which calls it may repeat with the same owner and fence,
// retries (docs/state-machine.md). Found by internal/check: a release
// whose reply the fault proxy dropped was answered "lease lost".

// processor runs a command built by hand: every go-redis client and
// pipeline has Process.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceCmd is a script call go-redis must not send again after a
// connection error (it may have run); a call refused before it was sent,
// and a MOVED or ASK redirect, are still followed.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to re-send the call.
func (onceCmd) NoRetry() bool { return true }

// evalCmd builds EVALSHA (or EVAL, with sha false) of s, as go-redis's
// Script does, with the keys' position set for cluster routing.
func evalCmd(ctx context.Context, s *script, sha bool, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	if sha {
		cmdArgs = append(cmdArgs, "evalsha", s.sha, len(keys))
	} else {
		cmdArgs = append(cmdArgs, "eval", s.src, len(keys))
	}
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// runScriptOnce runs s by EVALSHA, and by EVAL when the server does not know
// it yet (NOSCRIPT: it did not run), each sent at most once.
func runScriptOnce(ctx context.Context, p processor, s *script, keys []string, args []any) *redis.Cmd {
	cmd := evalCmd(ctx, s, true, keys, args)
	_ = p.Process(ctx, onceCmd{cmd})
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // HasErrorPrefix allocates, even for nil
		cmd = evalCmd(ctx, s, false, keys, args)
		_ = p.Process(ctx, onceCmd{cmd})
	}
	return cmd
}
