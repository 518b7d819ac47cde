package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/await"
	"github.com/idemkit/idem/internal/finalctx"
	"github.com/idemkit/idem/internal/handlerctx"
	"github.com/idemkit/idem/internal/outcome"
	"github.com/idemkit/idem/store"
)

// ErrTenantMissing, returned by Options.Tenant, says that the call has no
// tenant (no credentials): it is refused with UNAUTHENTICATED (reason
// TENANT_MISSING) unless Options.AllowAnonymous. It is
// idem.ErrTenantMissing, which idemhttp.ErrTenantMissing is too.
var ErrTenantMissing = idem.ErrTenantMissing

// Options configures the server interceptor. NewServerInterceptor refuses
// a nil *Options, and Options without Tenant or AllowAnonymous: it has to
// be told how calls are scoped.
type Options struct {
	// Methods are the full method names ("/pkg.Service/Method") the
	// interceptor protects; other calls pass through untouched. Nil means
	// every unary method.
	Methods []string
	// RequireKey answers a protected call without a key with
	// INVALID_ARGUMENT (reason KEY_REQUIRED). False lets it pass through
	// unprotected.
	RequireKey bool
	// KeyField names a string field of the request message that carries
	// the key when the metadata has none: AIP-155's "request_id". A key
	// in both places must be the same (else INVALID_ARGUMENT). A request
	// without the field, or with it empty, has no key there. Empty means
	// the metadata only.
	KeyField string
	// Tenant returns the scope of a call's keys from its context (peer
	// credentials, authenticated metadata): the same key from two tenants
	// never meets. It returns "" or ErrTenantMissing for a call without
	// one, which is refused with UNAUTHENTICATED (reason TENANT_MISSING)
	// unless AllowAnonymous; any other error is refused with
	// UNAUTHENTICATED too, with the error's text in the status message:
	// say what the caller did wrong, nothing it may not see. Put the
	// interceptor after your authentication.
	Tenant func(ctx context.Context) (string, error)
	// AllowAnonymous lets calls without a tenant share the scope "". Nil
	// Tenant with AllowAnonymous puts every call in that scope. New
	// refuses a nil Tenant without it.
	AllowAnonymous bool
	// StatusPolicy decides from the handler's final status code what
	// becomes of the key: the answer stored and replayed, the key
	// released so a retry runs the handler again, or the key marked
	// UNKNOWN. A handler's SetDisposition, an error that wraps
	// idem.ErrOutcomeUnknown, and an ABORTED with idem's KEY_IN_FLIGHT (a
	// downstream idem service's, passed on: UNKNOWN) override it. Nil
	// means DefaultStatusPolicy.
	StatusPolicy func(codes.Code) Disposition
	// UnknownRetryAfter is the RetryInfo of the answer for an UNKNOWN key
	// when the engine gives none (it has no Reconcile, so only an
	// operator can settle it): set it when your operators settle keys
	// within so long. Zero means no RetryInfo: retrying is pointless until
	// someone resolves the key (the policy of idemhttp and
	// idemclient.Retrying too).
	UnknownRetryAfter time.Duration
	// Wait is how long a call that finds its key in flight waits for the
	// running call to finish, and is answered what it answered (a replay)
	// instead of ABORTED, as Restate attaches a duplicate to its running
	// call and idemhttp's Options.Wait does. The wait ends early when the
	// caller's deadline or cancellation comes; a call still in flight then
	// is answered ABORTED. Zero means no wait.
	Wait time.Duration
	// LeaseDuration and Retention override the engine's for these
	// methods. Zero means the engine's.
	LeaseDuration time.Duration
	Retention     time.Duration
	// Logger receives a line for every store failure, recovered panic and
	// failed finalize. Nil means slog.Default().
	Logger *slog.Logger
}

// NewServerInterceptor returns the unary server interceptor that gives
// the methods it protects idempotency keys on engine e. Install it after
// authentication:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, idemInterceptor))
//
// Streaming RPCs are not intercepted. Bad options are an error.
func NewServerInterceptor(e *idem.Engine, o *Options) (grpc.UnaryServerInterceptor, error) {
	if e == nil {
		return nil, errors.New("idemgrpc: NewServerInterceptor: nil engine")
	}
	var opt Options
	if o != nil {
		opt = *o
	}
	switch {
	case opt.Tenant == nil && !opt.AllowAnonymous:
		return nil, errors.New("idemgrpc: NewServerInterceptor: set Tenant, or AllowAnonymous for a service without tenants")
	case opt.UnknownRetryAfter < 0, opt.LeaseDuration < 0, opt.Retention < 0, opt.Wait < 0:
		return nil, errors.New("idemgrpc: NewServerInterceptor: negative UnknownRetryAfter, LeaseDuration, Retention or Wait")
	case (opt.LeaseDuration > 0 && opt.LeaseDuration < time.Millisecond) || (opt.Retention > 0 && opt.Retention < time.Millisecond):
		return nil, fmt.Errorf("idemgrpc: NewServerInterceptor: LeaseDuration %v or Retention %v is under the 1ms resolution of stores", opt.LeaseDuration, opt.Retention)
	case opt.LeaseDuration > store.MaxDuration || opt.Retention > store.MaxDuration:
		return nil, fmt.Errorf("idemgrpc: NewServerInterceptor: LeaseDuration %v or Retention %v is above %v (store.MaxDuration)", opt.LeaseDuration, opt.Retention, store.MaxDuration)
	}
	s := &server{e: e, require: opt.RequireKey, keyField: protoreflect.Name(opt.KeyField), tenant: opt.Tenant,
		anonymous: opt.AllowAnonymous, policy: opt.StatusPolicy, unknownAfter: opt.UnknownRetryAfter,
		lease: opt.LeaseDuration, retention: opt.Retention, wait: opt.Wait, log: opt.Logger, durations: newDurations()}
	if opt.KeyField != "" && !s.keyField.IsValid() {
		return nil, fmt.Errorf("idemgrpc: NewServerInterceptor: KeyField %q is not a protobuf field name", opt.KeyField)
	}
	if opt.Methods != nil {
		s.methods = make(map[string]bool, len(opt.Methods))
		for _, m := range opt.Methods {
			s.methods[m] = true
		}
	}
	if s.policy == nil {
		s.policy = DefaultStatusPolicy
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.wait > 0 {
		s.finished = &await.Waiters{}
	}
	return s.intercept, nil
}

type server struct {
	e            *idem.Engine
	methods      map[string]bool // nil: all
	require      bool
	keyField     protoreflect.Name
	tenant       func(context.Context) (string, error)
	anonymous    bool
	policy       func(codes.Code) Disposition
	unknownAfter time.Duration
	lease        time.Duration
	retention    time.Duration
	wait         time.Duration
	finished     *await.Waiters // wakes the waiting calls (Wait) when a call of this server finishes their key; nil without Wait
	log          *slog.Logger
	durations    *durations
}

var replayedTrailer = metadata.Pairs(TrailerReplayed, "true")

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.methods != nil && !s.methods[info.FullMethod] {
		return handler(ctx, req)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		// Another codec than protobuf (or golang/protobuf v1, gogo types):
		// nothing to fingerprint, no answer to store. A call that asks for
		// a key's protection is refused, never run unprotected; one
		// without a key passes, as it would with a protobuf message.
		if len(metadata.ValueFromIncomingContext(ctx, MetadataKey)) > 0 || s.require {
			return nil, errStatus(codes.InvalidArgument, ReasonKeyInvalid,
				"idem: this method's request is not a protobuf message, so its idempotency key cannot be honoured; the call was not run")
		}
		return handler(ctx, req)
	}
	key, err := s.key(ctx, msg)
	switch {
	case err != nil:
		return nil, errStatus(codes.InvalidArgument, ReasonKeyInvalid, err.Error())
	case key == "" && s.require:
		return nil, errStatus(codes.InvalidArgument, ReasonKeyRequired, "idem: this method requires an "+MetadataKey+" metadata entry")
	case key == "":
		return handler(ctx, req)
	}
	if err := idem.ValidateKey(key); err != nil {
		return nil, errStatus(codes.InvalidArgument, ReasonKeyInvalid, err.Error())
	}
	tenant, err := s.tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprint(info.FullMethod, msg)
	if err != nil {
		return nil, errStatus(codes.InvalidArgument, ReasonKeyInvalid, "idem: the request cannot be encoded to fingerprint it: "+err.Error())
	}
	// The work is detached from the caller's cancellation and deadline:
	// once it has started it runs to completion and is recorded, so that
	// the caller's retry gets the replay rather than a second execution.
	detached := context.WithoutCancel(ctx)
	ireq := idem.Request{Tenant: tenant, Key: key, Fingerprint: fp, LeaseDuration: s.lease, Retention: s.retention}
	att, err := s.e.Begin(detached, ireq)
	if err == nil && att.Outcome == idem.InFlight && s.wait > 0 {
		att, err = s.finished.Turn(detached, ctx.Done(), s.e, ireq, att, s.wait)
	}
	if err != nil {
		return nil, s.beginFailed(ctx, info.FullMethod, err)
	}
	switch att.Outcome {
	case idem.Acquired:
		return s.execute(ctx, detached, req, info, handler, att.Lease)
	case idem.Replayed:
		grpc.SetTrailer(ctx, replayedTrailer)
		return decodeResult(att.Result)
	case idem.InFlight:
		after := s.durations.estimate(info.FullMethod, att.RetryAfter)
		pushback(ctx, after)
		return nil, newStatus(codes.Aborted, ReasonKeyInFlight,
			"idem: a call with this idempotency key is in progress; retry after the RetryInfo delay", after, nil).Err()
	case idem.Mismatch:
		return nil, errStatus(codes.FailedPrecondition, ReasonKeyMismatch,
			"idem: this idempotency key was used for a different method or request message")
	case idem.Expired:
		return nil, errStatus(codes.FailedPrecondition, ReasonKeyExpired,
			"idem: the call with this idempotency key ran at "+att.Record.CompletedAt.UTC().Format(time.RFC3339)+
				" and its result is no longer kept; it is not run again")
	default: // idem.Unknown
		after := att.RetryAfter
		if after <= 0 {
			after = s.unknownAfter
		}
		return nil, unknownStatus(codes.Unknown, att.Record.Reason, att.Record.Fence, after)
	}
}

// key returns the call's key from its metadata or, with KeyField, from the
// request message; "" when it has none.
func (s *server) key(ctx context.Context, msg proto.Message) (string, error) {
	var key string
	if vs := metadata.ValueFromIncomingContext(ctx, MetadataKey); len(vs) > 1 {
		return "", fmt.Errorf("%w: %s sent %d times", idem.ErrInvalidKey, MetadataKey, len(vs))
	} else if len(vs) == 1 {
		key = vs[0]
		if key == "" {
			return "", fmt.Errorf("%w: empty %s", idem.ErrInvalidKey, MetadataKey)
		}
		// Not a valid HTTP/2 field value (RFC 9113 section 8.2.1): a proxy
		// trims or refuses it, and the same call would come as two keys.
		if strings.Trim(key, " \t") != key {
			return "", fmt.Errorf("%w: %s begins or ends with a space or a tab", idem.ErrInvalidKey, MetadataKey)
		}
	}
	if s.keyField == "" {
		return key, nil
	}
	field := fieldValue(msg, s.keyField)
	switch {
	case field == "":
		return key, nil
	case key != "" && key != field:
		return "", fmt.Errorf("%w: %s metadata and field %s differ", idem.ErrInvalidKey, MetadataKey, s.keyField)
	}
	return field, nil
}

// fieldValue returns the string field name of msg, "" when msg has no
// such singular string field (or msg is a nil message).
func fieldValue(msg proto.Message, name protoreflect.Name) string {
	if v := reflect.ValueOf(msg); !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
		return "" // a nil message, typed or not: ProtoReflect may dereference it
	}
	m := msg.ProtoReflect()
	if !m.IsValid() {
		return ""
	}
	fd := m.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() {
		return ""
	}
	return m.Get(fd).String()
}

func (s *server) tenantOf(ctx context.Context) (string, error) {
	if s.tenant == nil {
		return "", nil
	}
	tenant, err := s.tenant(ctx)
	switch {
	case errors.Is(err, ErrTenantMissing) || (err == nil && tenant == ""):
		if s.anonymous {
			return "", nil
		}
		return "", errStatus(codes.Unauthenticated, ReasonTenantMissing, "idem: the call has no tenant to scope its idempotency key")
	case err != nil:
		return "", errStatus(codes.Unauthenticated, ReasonTenantMissing, "idem: no tenant: "+err.Error())
	}
	if err := idem.ValidateTenant(tenant); err != nil {
		return "", errStatus(codes.InvalidArgument, ReasonTenantInvalid, err.Error())
	}
	return tenant, nil
}

// pushbackTrailer is the trailer in which a gRPC service config retry
// policy reads how long to wait before its next attempt.
const pushbackTrailer = "grpc-retry-pushback-ms"

// pushback tells a service config retry policy to wait d before it
// retries, as RetryInfo tells other clients.
func pushback(ctx context.Context, d time.Duration) {
	grpc.SetTrailer(ctx, metadata.Pairs(pushbackTrailer, strconv.FormatInt(d.Milliseconds(), 10)))
}

func (s *server) beginFailed(ctx context.Context, method string, err error) error {
	switch {
	case errors.Is(err, idem.ErrInvalidKey):
		return errStatus(codes.InvalidArgument, ReasonKeyInvalid, err.Error())
	case errors.Is(err, idem.ErrInvalidTenant):
		return errStatus(codes.InvalidArgument, ReasonTenantInvalid, err.Error())
	case errors.Is(err, store.ErrStoreFull):
		s.log.Warn("idemgrpc: store full; answering RESOURCE_EXHAUSTED", "method", method, "err", err)
		pushback(ctx, time.Second)
		return newStatus(codes.ResourceExhausted, ReasonStoreFull,
			"idem: the idempotency store is full; the call was not processed", time.Second, nil).Err()
	}
	s.log.Error("idemgrpc: store failed; answering UNAVAILABLE", "method", method, "err", err)
	pushback(ctx, time.Second)
	return newStatus(codes.Unavailable, ReasonStoreUnavailable,
		"idem: the idempotency store is unavailable; the call was not processed", time.Second, nil).Err()
}

// execute runs the handler under the lease and records what it answered.
// A panic in the handler is recovered: the key turns UNKNOWN (the handler
// may have had its effect) and the call is answered INTERNAL.
func (s *server) execute(ctx, detached context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, l *idem.Lease) (resp any, err error) {
	if cerr := l.Check(); cerr != nil {
		// The lease ended before the handler could start: nothing ran.
		fctx, cancel := context.WithTimeout(detached, idem.FinalizeTimeout)
		defer cancel()
		if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, idem.ErrLeaseLost) {
			s.log.Error("idemgrpc: releasing a key whose lease ended before the handler ran", "method", info.FullMethod, "err", rerr)
		}
		pushback(ctx, time.Second)
		return nil, newStatus(codes.Unavailable, ReasonLeaseLost,
			"idem: the idempotency lease ended before the call could run ("+cerr.Error()+"); it did not run: retry with the same key", time.Second, nil).Err()
	}
	x := &call{}
	x.ctx = handlerctx.Context{Context: l.Context(), Carried: &x.override}
	start := time.Now()
	finalized := false
	reason := "the handler panicked"
	defer func() {
		if finalized {
			return
		}
		// A panic in the handler, or in recording its answer. A panic
		// before the key's fate was recorded may have come after the
		// handler's effect: the key turns UNKNOWN (and its lease and
		// renewal end). One after it (the lease is closed) leaves the
		// recorded answer to the caller.
		p := recover() // nil for runtime.Goexit, which goes on
		s.log.Error("idemgrpc: "+reason, "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		fctx, cancel := context.WithTimeout(detached, idem.FinalizeTimeout) // the normal path's may be cancelled
		defer cancel()
		merr := l.MarkUnknown(fctx, reason)
		s.finished.Wake(l.ID())
		if errors.Is(merr, idem.ErrLeaseClosed) {
			return // resp, err: the handler's answer, as recorded
		}
		s.finalizeErr(info.FullMethod, merr)
		resp, err = nil, unknownStatus(codes.Internal, reason, l.Fence(), 0)
	}()
	resp, err = handler(&x.ctx, req)
	reason = "recording the handler's answer panicked"
	elapsed := time.Since(start)
	fctx := x.finalizeContext(detached)
	defer fctx.Cancel()
	resp, err = s.finalize(fctx, info.FullMethod, l, &x.override, resp, err, elapsed)
	finalized = true
	s.finished.Wake(l.ID())
	return resp, err
}

// statusDisposition is the status policy's word on code. A policy that
// panics has said nothing, and the handler's whole answer is in hand: it
// is stored (a retry gets it, never a second run), and the panic logged.
func (s *server) statusDisposition(method string, code codes.Code) (d Disposition) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("idemgrpc: the StatusPolicy panicked; the answer is stored", "method", method, "code", code.String(),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			d = DispositionStore
		}
	}()
	return s.policy(code)
}

// call is what a protected call needs beyond the request, in one
// allocation. It is not pooled: the handler may keep its context, and the
// store the finalize context.
type call struct {
	ctx      handlerctx.Context
	override handlerctx.Override
	final    finalctx.Context
}

// finalizeContext bounds the Complete, Release or MarkUnknown after the
// handler. It starts when the handler has returned, so that a slow
// handler leaves its finalize the whole FinalizeTimeout, and it does not
// end with the caller: the result is recorded even when the caller has
// gone.
func (x *call) finalizeContext(detached context.Context) *finalctx.Context {
	x.final.Start(detached, idem.FinalizeTimeout)
	return &x.final
}

// passedOnAnswer reports whether a handler's status with the ErrorInfo
// reason r is one of idem's own answers about a call's key, which a
// handler that passes on a downstream idem service's error returns.
func passedOnAnswer(code codes.Code, r string) bool {
	return code == codes.Unavailable && (r == ReasonStoreUnavailable || r == ReasonLeaseLost) ||
		code == codes.ResourceExhausted && r == ReasonStoreFull ||
		code == codes.Aborted && r == ReasonKeyInFlight
}

// finalize stores the handler's answer, releases the key or marks it
// UNKNOWN, as the handler declared (SetDisposition, or an error wrapping
// idem.ErrOutcomeUnknown, or idem.NotRun), else as the status policy says
// (its release is UNKNOWN after the handler sent a downstream step:
// handlerctx.Override.StepSent), and returns what the caller gets: the
// handler's own answer, except that an outcome-unknown error is answered
// as a retry would be.
func (s *server) finalize(fctx context.Context, method string, l *idem.Lease, o *handlerctx.Override, resp any, herr error, elapsed time.Duration) (any, error) {
	st, ok := status.FromError(herr)
	if !ok { // as grpc-go answers it: a context error is CANCELLED or DEADLINE_EXCEEDED, any other UNKNOWN
		st = status.FromContextError(herr)
	}
	d, reason := o.Get()
	chosen := d != 0 // by the handler, with its reason
	unknown := errors.Is(herr, idem.ErrOutcomeUnknown)
	if d == 0 {
		switch {
		case unknown:
			// The reason the handler chose (idem.OutcomeUnknown), never
			// the error's text: the reason is sent to the caller and to
			// every retry, and kept in the store.
			var ok bool
			if reason, ok = outcome.ChosenReason(herr); !ok {
				reason = "the handler returned an outcome-unknown error"
			}
			d = DispositionUnknown
		case outcome.IsNotRun(herr): // idem.NotRun: the handler stopped before its effect
			d = DispositionRelease
		case st.Code() == codes.Aborted && ErrorInfo(st) == ReasonKeyInFlight:
			// A downstream idem service's answer, passed on: the call
			// with the handler's key is running there. This ABORTED says
			// the work is under way, not that it did not run: a release
			// would let a retry run the handler (and, under a new key,
			// the downstream work) again.
			d, reason = DispositionUnknown, "a downstream call of the handler was still running (ABORTED, KEY_IN_FLIGHT)"
			unknown = true // answered as UNKNOWN too: passed on, the ABORTED would say the caller's own key is in flight
		default:
			d, reason = s.statusDisposition(method, st.Code()), "status "+st.Code().String()
			if d == DispositionRelease && o.StepSent() {
				// The status may be a downstream's, passed on after
				// another downstream step had its effect: it proves
				// nothing of the handler's work.
				d, reason = DispositionUnknown, reason+" after a downstream step was sent"
			}
		}
	}
	// A downstream idem service's answer, passed on, speaks of the
	// downstream call only: "did not run" (STORE_UNAVAILABLE, LEASE_LOST,
	// STORE_FULL) or "running" (KEY_IN_FLIGHT). Unless the key is released, the
	// handler may have done its own work: whatever kept the key (the
	// status policy, SetDisposition), it is UNKNOWN and answered so. Left
	// as it is, the answer would tell the caller's client that its own
	// call did not run, or that its own key is in flight, and stored it
	// would be replayed so.
	if r := ErrorInfo(st); d != DispositionRelease && !unknown && passedOnAnswer(st.Code(), r) {
		if !chosen { // the handler's own reason stays
			reason = "a downstream call of the handler answered " + st.Code().String() + " (" + r + ")"
		}
		d, unknown = DispositionUnknown, true
	}
	if unknown {
		herr = unknownStatus(codes.Unknown, reason, l.Fence(), 0)
	}
	switch d {
	case DispositionUnknown:
		s.finalizeErr(method, l.MarkUnknown(fctx, reason))
		return resp, herr
	case DispositionRelease:
		s.finalizeErr(method, l.Release(fctx))
		return resp, herr
	}
	b := resultBuffers.Get().(*resultBuffer)
	defer putBuffer(b)
	res, err := encodeResult(b, resp, st)
	switch {
	case err != nil:
		s.log.Error("idemgrpc: the handler's answer cannot be stored; the key is marked UNKNOWN", "method", method, "err", err)
		err = l.MarkUnknown(fctx, "the answer cannot be encoded: "+err.Error())
	default:
		err = l.Complete(fctx, res)
		if errors.Is(err, idem.ErrResultTooLarge) { // the work ran; its answer cannot be kept
			err = l.MarkUnknown(fctx, err.Error())
		}
		if err == nil {
			s.durations.add(method, elapsed)
		}
	}
	s.finalizeErr(method, err)
	return resp, herr
}

func (s *server) finalizeErr(method string, err error) {
	if err != nil && !errors.Is(err, idem.ErrLeaseLost) { // the engine logged a lost lease
		s.log.Error("idemgrpc: recording the result failed and the engine could not hold it; the key stays in flight until its lease ends", "method", method, "err", err)
	}
}
