package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

// functions is the scripts as one Redis 7 function library (FCALL), for
// Options.Functions.
type functions struct {
	lib   string             // the library's name: idem_ and a hash of code
	code  string             // FUNCTION LOAD's argument
	names map[*script]string // each script's function name
}

// libraryFunctions is the library of every script: record.lua once, then
// each script's body as a function of (KEYS, ARGV), the names the scripts
// already use.
var libraryFunctions = func() *functions {
	var body strings.Builder
	body.WriteString(recordLua)
	for _, s := range allScripts {
		fmt.Fprintf(&body, "\nredis.register_function('LIB_%s', function(KEYS, ARGV)\n%s\nend)\n", s.name, s.body)
	}
	sum := sha1.Sum([]byte(body.String()))
	lib := "idem_" + hex.EncodeToString(sum[:8])
	f := &functions{lib: lib, code: "#!lua name=" + lib + "\n" + strings.ReplaceAll(body.String(), "'LIB_", "'"+lib+"_"),
		names: map[*script]string{}}
	for _, s := range allScripts {
		f.names[s] = lib + "_" + s.name
	}
	return f
}()

// call runs s by FCALL, loading the library first when the server does not
// have it (a new server, a restart without persistence, FUNCTION FLUSH).
func (f *functions) call(ctx context.Context, c rueidis.Client, s *script, keys, args []string) (rueidis.RedisMessage, error) {
	cmd := func() rueidis.Completed {
		return c.B().Fcall().Function(f.names[s]).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	msg, err := c.Do(ctx, cmd()).ToMessage()
	if !isFunctionNotFound(err) {
		return msg, err
	}
	if lerr := f.load(ctx, c); lerr != nil {
		return msg, errors.Join(err, lerr)
	}
	return c.Do(ctx, cmd()).ToMessage()
}

func isFunctionNotFound(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.Contains(re.Error(), "Function not found")
}

// load loads the library on every node of the client (every primary of a
// Cluster: a function is kept per shard; replicas get it by replication
// and refuse a load). It succeeds when at least one node took it or had
// it already.
func (f *functions) load(ctx context.Context, c rueidis.Client) error {
	var errs []error
	ok := false
	for addr, node := range c.Nodes() {
		err := node.Do(ctx, node.B().FunctionLoad().FunctionCode(f.code).Build()).Error()
		switch {
		case err == nil, err != nil && strings.Contains(err.Error(), "already exists"):
			ok = true
		case err != nil && strings.Contains(err.Error(), "READONLY"):
		default:
			errs = append(errs, fmt.Errorf("FUNCTION LOAD on %s: %w", addr, err))
		}
	}
	if !ok && len(errs) == 0 {
		errs = append(errs, errors.New("the client knows no node"))
	}
	if !ok {
		return fmt.Errorf("redisstore: functions: %w", errors.Join(errs...))
	}
	return nil
}
