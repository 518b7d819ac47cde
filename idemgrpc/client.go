package idemgrpc

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/handlerctx"
)

// ClientOptions configures the client interceptor. A nil *ClientOptions
// means all defaults.
type ClientOptions struct {
	// Methods are the full method names the interceptor gives keys to and
	// retries; other calls pass through untouched. Nil means every unary
	// method.
	Methods []string
	// MaxAttempts bounds the attempts of one logical call, the first
	// included. Zero means 4; 1 attaches the key and never retries.
	MaxAttempts int
	// BaseDelay is the wait before the first retry of an answer without
	// RetryInfo, doubled for each later one, with jitter. Zero means 100ms.
	BaseDelay time.Duration
	// MaxDelay caps one wait, a server's RetryInfo included. Zero means 10s.
	// The RetryInfo of a call in flight (the method's average duration) is
	// doubled for each retry after the first.
	MaxDelay time.Duration
	// PerAttemptTimeout, when set, bounds each attempt: an attempt cut off
	// by it is retried with the same key (the server either replays or is
	// still running the first). Zero means attempts are bounded only by
	// the call's context.
	PerAttemptTimeout time.Duration
	// NewKey makes the key of a logical call that has none, outside an
	// idempotency scope only: under one (see NewClientInterceptor) the key
	// is derived from the call's step. Nil means crypto/rand.Text (26
	// random base32 characters).
	NewKey func() string
	// KeyField names a string field of the request message that carries
	// the key, as the server's Options.KeyField does: AIP-155's
	// "request_id". A call without a key of its own (WithKey, the
	// metadata) whose request has the field non-empty gets the field's
	// value as its key, sent in the metadata too (unless metadata cannot
	// carry it as it is: not printable ASCII, or a space at an end), instead
	// of a made one; the request is never modified. A key of the call's own that differs
	// from the field is refused before sending (see NewClientInterceptor).
	// A request that is not a protobuf message, or without the field as a
	// singular string, or with it empty, has no key there. Empty means the
	// field is not read: a server with KeyField then refuses a request
	// whose field differs from the made key.
	KeyField string
}

// NewClientInterceptor returns the unary client interceptor that gives
// every logical call an idempotency key and keeps it across retries:
// the caller's (WithKey, or an idempotency-key already in the outgoing
// metadata), else, with KeyField, the request message's field (AIP-155's
// request_id), else a fresh one. The key travels in the metadata, so the
// retries of a service config retry policy, which resend the same
// metadata, carry it too.
//
// Under an idempotency scope (idemclient.ScopeFrom: a handler behind
// idemgrpc or idemhttp, work run by idem.Engine.Do, or
// idemclient.WithScope), the fresh key is the one idemclient.Propagator
// derives, idemclient.StepKey of the scope and of the step named with
// idemclient.WithStep, the same on every run of the handler; a call
// whose context names no step is not sent, and fails with an error that
// matches idemclient.ErrNoStep and whose status is INVALID_ARGUMENT with
// ErrorInfo reason STEP_REQUIRED. A random key there would be new on each
// run, and a run taken over or repeated would do the downstream work
// again. The error is not marked idem.NotRun: the handler's work may have
// had effects before the call, and returned as it is the error keeps the
// handler's key; a handler that knows it did nothing yet returns
// idem.NotRun(err). A call with a derived key is a step of the handler
// behind idemgrpc or idemhttp whose scope it is: once an attempt may have
// reached its server, the handler's status policy no longer releases the
// handler's key (an ABORTED may be a second downstream's, passed on after
// the first had its effect), it turns the key UNKNOWN; SetDisposition
// still releases it.
//
// It retries, up to MaxAttempts, the answers that say the call did not
// run or is still running (UNAVAILABLE, ABORTED, RESOURCE_EXHAUSTED, and
// DEADLINE_EXCEEDED of an attempt cut off by PerAttemptTimeout), waiting
// the server's RetryInfo when it gives one. An outcome-unknown answer
// (ErrorInfo reason OUTCOME_UNKNOWN) is retried only when it carries a
// RetryInfo (a reconciliation may settle it) and within the same bounds;
// it is returned as an *OutcomeUnknownError, and so is the end of a call
// an attempt of which may have run unanswered (see OutcomeUnknownError).
// A replayed answer that settles the key is not retried: every retry would
// get it again.
//
// With KeyField, a call whose key of its own (WithKey, the metadata)
// differs from the request's non-empty field is not sent: its error
// matches idem.ErrInvalidKey and its status is INVALID_ARGUMENT with
// reason KEY_INVALID, as an idem server with the same KeyField answers
// it. Bad options are an error, a KeyField that is no protobuf field name
// included.
func NewClientInterceptor(o *ClientOptions) (grpc.UnaryClientInterceptor, error) {
	var opt ClientOptions
	if o != nil {
		opt = *o
	}
	if opt.MaxAttempts < 0 || opt.BaseDelay < 0 || opt.MaxDelay < 0 || opt.PerAttemptTimeout < 0 {
		return nil, errors.New("idemgrpc: NewClientInterceptor: negative MaxAttempts, BaseDelay, MaxDelay or PerAttemptTimeout")
	}
	c := &client{opt: opt, keyField: protoreflect.Name(opt.KeyField)}
	if opt.KeyField != "" && !c.keyField.IsValid() {
		return nil, fmt.Errorf("idemgrpc: NewClientInterceptor: KeyField %q is not a protobuf field name", opt.KeyField)
	}
	if c.opt.MaxAttempts == 0 {
		c.opt.MaxAttempts = 4
	}
	if c.opt.BaseDelay == 0 {
		c.opt.BaseDelay = 100 * time.Millisecond
	}
	if c.opt.MaxDelay == 0 {
		c.opt.MaxDelay = 10 * time.Second
	}
	if c.opt.NewKey == nil {
		c.opt.NewKey = rand.Text
	}
	if opt.Methods != nil {
		c.methods = make(map[string]bool, len(opt.Methods))
		for _, m := range opt.Methods {
			c.methods[m] = true
		}
	}
	return c.invoke, nil
}

type client struct {
	opt      ClientOptions
	keyField protoreflect.Name
	methods  map[string]bool // nil: all
}

type keyContextKey struct{}

// WithKey returns a context whose calls through the client interceptor
// carry key: use it to retry a logical call across process restarts, or
// after the interceptor gave up, with the key it had.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyContextKey{}, key)
}

// KeyFromContext returns the key WithKey put in ctx.
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyContextKey{}).(string)
	return k, ok
}

// Replayed reports whether a call's trailer (grpc.Trailer) marks its
// answer as a replay of a stored result.
func Replayed(trailer metadata.MD) bool {
	vs := trailer.Get(TrailerReplayed)
	return len(vs) == 1 && vs[0] == "true"
}

// OutcomeUnknownError is returned by the client interceptor when the
// server says that an earlier call with the key may have taken effect
// and its result is not known, or when an attempt that may have reached
// the server ended without its answer (mayHaveRun: UNAVAILABLE, the
// connection broke or the server went away mid-call; DEADLINE_EXCEEDED or
// CANCELLED, a deadline or a cancellation cut it; RESOURCE_EXHAUSTED, an
// answer over the receive limit), and no later attempt got an answer that
// settles the key: retrying with a new key may do the work twice; retry
// with Key. errors.Is(err, idem.ErrOutcomeUnknown) is true, and
// status.Code and status.FromError give the last answer's status, so
// code that branches on the code reads it as before.
//
// Two answers settle the key and end the call as they are: a success,
// and a replay of the key's stored answer (trailer idempotent-replayed
// "true", see Replayed) with a final error status that grpc-go never
// makes itself, such as INVALID_ARGUMENT, returned bare (settles says
// which). Nothing else does: a replayed success the client could not
// take (over its receive limit), a replayed OUTCOME_UNKNOWN, an answer
// that is not a replay (the client cannot tell a handler's fresh error
// from one made in front of the idem server), ABORTED KEY_IN_FLIGHT,
// UNAVAILABLE STORE_UNAVAILABLE, a transport error or a deadline.
//
// An attempt that never had a connection to send on (a refused dial, a
// failed name resolution, a deadline that passed while waiting for one),
// or that the idem server answered UNAVAILABLE with reason
// STORE_UNAVAILABLE or LEASE_LOST, or RESOURCE_EXHAUSTED with STORE_FULL,
// did not run: its status comes back bare.
type OutcomeUnknownError struct {
	Key    string
	Status *status.Status
}

// Error says that the outcome is unknown, and the server's message.
func (e *OutcomeUnknownError) Error() string {
	return "idemgrpc: outcome unknown for key " + e.Key + ": " + e.Status.Message()
}

// GRPCStatus returns the server's status.
func (e *OutcomeUnknownError) GRPCStatus() *status.Status { return e.Status }

// Is reports idem.ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == idem.ErrOutcomeUnknown }

func (c *client) invoke(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.methods != nil && !c.methods[method] {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	key, _ := KeyFromContext(ctx)
	md, _ := metadata.FromOutgoingContext(ctx)
	inMD := len(md.Get(MetadataKey)) > 0
	if inMD {
		key = md.Get(MetadataKey)[0] // the caller set it; keep theirs
	}
	var field string
	step := false // the key is derived from the scope: the call is a step of the handler whose scope it is
	if msg, ok := req.(proto.Message); ok && c.keyField != "" {
		field = fieldValue(msg, c.keyField)
	}
	switch {
	case field != "" && inMD && key == "":
		return &refusedError{method: method, reason: ReasonKeyInvalid,
			err: fmt.Errorf("%w: empty %s metadata", idem.ErrInvalidKey, MetadataKey)}
	case field != "" && key != "" && key != field:
		// The server with the same KeyField refuses it: sent, it would
		// only cost a round trip and a retry budget to learn so.
		return &refusedError{method: method, reason: ReasonKeyInvalid,
			err: fmt.Errorf("%w: the call's key (WithKey or %s metadata) and field %s differ", idem.ErrInvalidKey, MetadataKey, c.keyField)}
	case key == "" && field != "":
		key = field // the caller's key, in the request: AIP-155
	case key == "" && !inMD:
		var err error
		if key, step, err = c.newKey(ctx); err != nil {
			e := &refusedError{method: method, err: err}
			if errors.Is(err, idemclient.ErrNoStep) {
				e.reason = ReasonStepRequired
			}
			return e
		}
	}
	// A field's key that metadata cannot carry as it is (not printable
	// ASCII: grpc-go refuses it; a space at an end: proxies trim it) goes
	// in the field only, where the server with the same KeyField reads it.
	fieldOnly := key == field && !metadataValue(key)
	if !inMD && !fieldOnly {
		// In the metadata too: the server reads it there whatever its
		// KeyField, and a service config retry policy resends it.
		ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
	}
	var err error
	unknown := false // an attempt's outcome is unknown: the server said so, or it may have reached the server and got no answer
	for attempt := 1; ; attempt++ {
		var reached bool
		var trailer metadata.MD
		var o *handlerctx.Override
		if step {
			o = handlerctx.BeginStep(ctx)
		}
		reached, err = c.attempt(ctx, method, req, reply, cc, invoker, opts, &trailer)
		if !reached {
			o.NotSent()
		}
		if err == nil {
			return nil
		}
		st, _ := status.FromError(err)
		if settles(st, trailer) {
			return err // the key's final answer, the same on every retry
		}
		delay, retry := c.retryable(ctx, err, attempt)
		if ErrorInfo(st) == ReasonOutcomeUnknown || reached && mayHaveRun(st) {
			unknown = true
		}
		if unknown {
			// Whichever way the call ends after it (a later ABORTED
			// KEY_IN_FLIGHT says nothing of it), the caller gets the key
			// to come back with: one the interceptor made is known nowhere
			// else. The status stays the last answer's.
			err = &OutcomeUnknownError{Key: key, Status: st}
		}
		if !retry || attempt >= c.opt.MaxAttempts {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < delay {
			return err // the wait would outlast the call
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// newKey makes the key of a call that has none. Under an idempotency
// scope it is the key idemclient.Propagator derives from the step, or
// the reason there is none (idemclient.ErrNoStep, a scope's invalid
// tenant or key): a random key there would be new on each run of the
// handler. Elsewhere it is NewKey's. derived says the key is a derived one.
func (c *client) newKey(ctx context.Context) (key string, derived bool, err error) {
	if _, _, ok := idemclient.ScopeFrom(ctx); !ok {
		return c.opt.NewKey(), false, nil
	}
	key, err = idemclient.DerivedKey(ctx)
	return key, err == nil, err
}

// refusedError is a call the interceptor did not send, for want of a
// key, or with two keys that differ. Its status is INVALID_ARGUMENT, as
// the server answers a call without a key it requires or with a metadata
// key and a field that differ (with ErrorInfo reason, when set): the call
// as made lacks what its key needs, and no retry, nor any change on the
// server, would help.
type refusedError struct {
	method string
	reason string // the ErrorInfo reason, "" for none
	err    error
}

func (e *refusedError) Error() string {
	msg := "idemgrpc: " + e.method + " not sent: " + e.err.Error()
	if errors.Is(e.err, idemclient.ErrNoStep) {
		msg += " (name each call's step, reads too, or list only the methods that change state in ClientOptions.Methods)"
	}
	return msg
}

func (e *refusedError) Unwrap() error { return e.err }

func (e *refusedError) GRPCStatus() *status.Status {
	if e.reason != "" {
		return newStatus(codes.InvalidArgument, e.reason, e.Error(), 0, nil)
	}
	return status.New(codes.InvalidArgument, e.Error())
}

// attempt makes one attempt, fills in its trailer, and says whether it
// may have reached the server: false only when grpc-go never had a stream
// for it (a refused dial, a failed name resolution, a deadline that passed
// while waiting for a connection), which it tells by not filling in the
// peer. A service
// config retry policy may have sent an earlier copy of the call whose
// peer the last one's hides, so under one every failed attempt counts as
// reached: never "not sent" on a guess.
func (c *client) attempt(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, trailer *metadata.MD) (reached bool, err error) {
	var p peer.Peer
	// Never into the caller's array. grpc-go fills every grpc.Trailer
	// option of a call, so a caller's own still gets the trailer.
	opts = append(opts[:len(opts):len(opts)], grpc.Peer(&p), grpc.Trailer(trailer))
	if c.opt.PerAttemptTimeout > 0 {
		actx, cancel := context.WithTimeout(ctx, c.opt.PerAttemptTimeout)
		defer cancel()
		ctx = actx
	}
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return p.Addr != nil || cc == nil || cc.GetMethodConfig(method).RetryPolicy != nil, err
	}
	return true, nil
}

// mayHaveRun reports whether an attempt that reached the server and ended
// with st may have run: it got no answer (UNAVAILABLE after a connection
// broke, a deadline or cancellation that cut it), or an UNAVAILABLE or
// RESOURCE_EXHAUSTED that does not say that nothing ran, as the idem
// server's store-down, lease-lost and store-full answers do. grpc-go
// makes a RESOURCE_EXHAUSTED itself for an answer larger than the
// client's receive limit: the call ran.
func mayHaveRun(st *status.Status) bool {
	r := ErrorInfo(st)
	switch st.Code() {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	case codes.Unavailable:
		return r != ReasonStoreUnavailable && r != ReasonLeaseLost
	case codes.ResourceExhausted:
		return r != ReasonStoreFull
	}
	return false
}

// metadataValue says whether s goes in gRPC metadata as it is: printable
// ASCII (grpc-go refuses the rest) without a space at either end (the
// server refuses a key with one, which a proxy would trim).
func metadataValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return strings.Trim(s, " ") == s
}

// settles says whether a failed attempt's status is the key's stored
// answer, replayed by the idem server: the handler's final word on the
// call, whatever an earlier attempt left unknown. That is a replay
// (trailer idempotent-replayed "true") whose code grpc-go never makes
// itself once an answer has come: a replayed success that the client
// could not take (over its receive limit: RESOURCE_EXHAUSTED; a message
// it could not decode or decompress: INTERNAL, UNIMPLEMENTED; its
// context's end: CANCELLED, DEADLINE_EXCEEDED) carries the replay's
// trailer too, and says nothing of the work, which ran. A replayed
// OUTCOME_UNKNOWN (a handler passed on a downstream service's) settles
// nothing.
//
// An answer that is not a replay does not settle the key either, though
// the idem server runs the handler under a key only when no earlier
// attempt with it took effect: a fresh answer carries no mark of its own,
// so the client cannot tell the handler's INVALID_ARGUMENT from one made
// in front of the interceptor (authentication, a proxy, a method or
// server without it), which says nothing of the earlier attempt.
func settles(st *status.Status, trailer metadata.MD) bool {
	if !Replayed(trailer) || ErrorInfo(st) == ReasonOutcomeUnknown {
		return false
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange, codes.DataLoss, codes.Unauthenticated:
		return true
	}
	return false
}

// retryable says whether err may be retried with the same key, and after
// how long.
func (c *client) retryable(ctx context.Context, err error, attempt int) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	st, _ := status.FromError(err)
	delay, hasInfo := RetryDelay(st)
	switch st.Code() {
	case codes.Unavailable, codes.Aborted, codes.ResourceExhausted:
	case codes.DeadlineExceeded: // the attempt's own timeout, the call's is not over
		if c.opt.PerAttemptTimeout == 0 {
			return 0, false
		}
	default:
		if ErrorInfo(st) != ReasonOutcomeUnknown || !hasInfo {
			return 0, false
		}
	}
	// A server's delay is its word: bounded to [0, MaxDelay] before it is
	// doubled, so that no value overflows into a negative wait.
	delay = min(max(delay, 0), c.opt.MaxDelay)
	if hasInfo && ErrorInfo(st) == ReasonKeyInFlight && delay > 0 {
		// The server's delay for a call in flight is the method's average
		// duration: a call that outlasts it is found in flight again, so
		// each later wait doubles, and MaxAttempts covers a call several
		// times slower than the average (Options.Wait covers any).
		if shift := min(attempt-1, 16); delay > c.opt.MaxDelay>>shift {
			delay = c.opt.MaxDelay
		} else {
			delay <<= shift
		}
	}
	if !hasInfo {
		// Jitter over [d/2, d]: the retries of many callers spread out.
		d := c.opt.BaseDelay << min(attempt-1, 16)
		if d <= 0 || d > c.opt.MaxDelay { // past the cap, or overflowed
			d = c.opt.MaxDelay
		}
		delay = d/2 + mrand.N(d/2+1)
	}
	return min(delay, c.opt.MaxDelay), true
}
