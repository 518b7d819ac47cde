// Package idemgrpc gives unary gRPC methods idempotency keys on an
// idem.Engine: a server interceptor that runs a method at most once per
// (tenant, key) and replays its answer to retries, and a client
// interceptor that gives every logical call a key and keeps it across
// retries.
//
//	engine, _ := idem.New(store, nil)
//	si, _ := idemgrpc.NewServerInterceptor(engine, &idemgrpc.Options{Tenant: tenantFromPeer})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, si))
//
//	ci, _ := idemgrpc.NewClientInterceptor(nil)
//	conn, _ := grpc.NewClient(target, grpc.WithUnaryInterceptor(ci), ...)
//
// # The key, the tenant and the fingerprint
//
// The key is the idempotency-key metadata entry (MetadataKey), or, with
// Options.KeyField, a string field of the request message: AIP-155's
// request_id. A key is 1 to 255 bytes of UTF-8 without control
// characters, sent once; anything else is INVALID_ARGUMENT. A call
// without a key passes through unprotected, or, with Options.RequireKey,
// is INVALID_ARGUMENT.
//
// The tenant scopes keys: the same key from two tenants never meets.
// Options.Tenant derives it from the call's context (peer certificate,
// authenticated metadata). A call without one is refused UNAUTHENTICATED:
// the key of an unidentified caller could replay another caller's answer.
// Options.AllowAnonymous puts such calls in one shared scope instead, for
// services without callers to tell apart.
//
// The fingerprint is the SHA-256 of the full method name and the
// request's deterministic protobuf encoding: the same key with another
// method or another message is FAILED_PRECONDITION.
//
// # What a call gets
//
//   - first call: the handler runs under a lease, on a context detached
//     from the caller's cancellation and deadline (once started, the work
//     runs to completion and is recorded, so the caller's retry gets the
//     replay, not a second run). idem.LeaseFromContext gives the
//     handler its lease: pass Lease.Fence with its side effects and call
//     Lease.Check before one. Its answer, the
//     response message or the final status with its details, is stored,
//     or the key released, or marked UNKNOWN, as Options.StatusPolicy says
//     (DefaultStatusPolicy: ABORTED releases; UNAVAILABLE,
//     RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and CANCELLED, which grpc-go
//     makes for a downstream call that may have run, are unknown; the rest, OK,
//     INTERNAL and UNKNOWN included, is stored; a release is unknown after
//     the handler sent a downstream step, a call with a key derived from
//     its scope that may have left), unless the handler
//     declared otherwise with SetDisposition or returned an error wrapping
//     idem.ErrOutcomeUnknown;
//   - a retry after that: the stored answer, with the trailer
//     idempotent-replayed: true (Replayed reads it). Response headers and
//     trailers the handler set are not stored;
//   - a retry while the first still runs: ABORTED, the code gRPC's
//     guidance gives for "retry the whole transaction", with a RetryInfo
//     whose delay is the method's recent average duration, in
//     milliseconds, at most the rest of the lease (100ms before the
//     method has finished a call), and the same delay in the trailer
//     grpc-retry-pushback-ms, which a service config retry policy reads
//     (the store-down and lease-ended answers below carry both too).
//     With Options.Wait it first waits, up to Wait and its own deadline,
//     for the running call, and is answered what that call answered;
//   - the same key with a different method or message: FAILED_PRECONDITION;
//   - the store unreachable: UNAVAILABLE with a RetryInfo, and the handler
//     does not run (fail closed); a full bounded store: RESOURCE_EXHAUSTED;
//   - the lease ended before the handler could start: UNAVAILABLE, the key
//     released, nothing ran.
//
// Every status the interceptor answers itself carries a
// google.rpc.ErrorInfo with Domain ErrorDomain and one of the Reason
// constants; ErrorInfo and RetryDelay read them.
//
// # Outcome unknown
//
// A key is UNKNOWN when its work may have taken effect and no result is
// recorded: the handler panicked, returned an error wrapped with
// idem.OutcomeUnknown (or any error matching idem.ErrOutcomeUnknown, such
// as a downstream idemclient.OutcomeUnknownError), declared
// DispositionUnknown, answered DEADLINE_EXCEEDED or CANCELLED, or its
// owner's lease ended while it ran. A call with such a key does not run
// the handler again, and is answered UNKNOWN with the ErrorInfo reason
// OUTCOME_UNKNOWN (its metadata holds the fence of the attempt and the
// reason: the one given to idem.OutcomeUnknown or SetDisposition, or a
// fixed phrase, never the error's text), and a RetryInfo only when a
// retry may find it settled (a reconciliation is configured, or
// Options.UnknownRetryAfter). A handler error wrapped with idem.NotRun
// (it stopped before its effect) releases the key, and the caller gets
// the error's status; the error of an Engine.Do of the handler's own
// that released its key is not one (the handler may have had effects
// before it) unless the handler wraps it with idem.NotRun itself. A
// Reconcile or an operator's Resolve that finds the work done records the
// answer in the interceptor's form with EncodeResult, and retries get it
// replayed.
//
// Why UNKNOWN: the answer must say that the work may or may not have
// happened, and must not invite blind retries. ABORTED and UNAVAILABLE are
// what retry policies retry, and they mean "not done, try again";
// FAILED_PRECONDITION means "will fail until the state changes" and
// DATA_LOSS means data was lost or corrupted, neither of which is true.
// UNKNOWN is gRPC's code for an error whose nature is not known, is in no
// usual retry policy, and the ErrorInfo reason tells it apart from a
// handler's own stored UNKNOWN. The call whose handler panicked gets
// INTERNAL with the same ErrorInfo; the server does not crash.
//
// # The client
//
// NewClientInterceptor attaches a key per logical call: the caller's
// (WithKey, or an idempotency-key already in the outgoing metadata), else,
// with ClientOptions.KeyField, the request's field (AIP-155's request_id,
// which the server with the same Options.KeyField reads: a made key would
// differ from it, and the server refuses a call whose two keys differ),
// else a fresh random one, or, under an idempotency scope (a handler behind
// idemgrpc or idemhttp, work run by idem.Engine.Do, idemclient.WithScope),
// idemclient.StepKey of the scope and of the step named with
// idemclient.WithStep: the same on every run of the handler, so a run
// taken over or repeated does not do the downstream work again. Under a
// scope, a call whose context names no step is not sent: its error
// matches idemclient.ErrNoStep, its status is INVALID_ARGUMENT
// (STEP_REQUIRED), and it is not marked idem.NotRun (the handler may
// have had effects before the call: it keeps its key unless it wraps the
// error in idem.NotRun itself). Nor is a
// call whose own key differs from its request's KeyField field: its error
// matches idem.ErrInvalidKey, its status is INVALID_ARGUMENT (KEY_INVALID),
// as the server would answer. The key goes in the metadata whatever its
// source (a field's that metadata cannot carry as it is, not printable
// ASCII or with a space at an end, stays in the field alone), and the
// request is never modified. The
// interceptor's own retries, and those of a service config retry policy
// (which resend the call's metadata), carry the same key. It
// retries UNAVAILABLE, ABORTED and RESOURCE_EXHAUSTED up to
// ClientOptions.MaxAttempts, waiting the server's RetryInfo (capped by
// MaxDelay; for a call in flight, doubled for each retry after the first)
// or a jittered backoff, never past the call's deadline. An
// outcome-unknown answer is retried only when it carries a RetryInfo and
// within the same bounds, and is returned as an *OutcomeUnknownError:
// the caller decides, knowing a new key may run the work twice. So is a
// call that ends after an attempt that may have reached the server and
// got no answer: UNAVAILABLE after the connection broke or the server went
// away mid-call (or any UNAVAILABLE it answered that does not say that
// nothing ran), DEADLINE_EXCEEDED or CANCELLED after the attempt was
// sent, RESOURCE_EXHAUSTED (grpc-go's own for an answer over the receive
// limit, or one that does not say the store was full). The error carries
// the key (retry with WithKey and its Key), and status.Code and
// status.FromError still give the last status (OutcomeUnknownError has a
// GRPCStatus method). A later attempt that gets the key's stored answer
// replayed (trailer idempotent-replayed) settles the key: that answer, a
// final error status that grpc-go never makes itself included, comes back
// bare and is not retried. A
// fresh answer does not settle it: the client cannot tell a handler's
// from one made in front of the idem server. A call none of whose attempts had a connection to
// send on (a refused dial, a failed name resolution, a deadline that
// passed while waiting for one) ran nowhere, and gets the bare status, as
// does one the idem server answered UNAVAILABLE because its store was down
// or the lease ended before the handler started, or RESOURCE_EXHAUSTED
// because its store was full. Under a service config retry policy, whose
// earlier attempts the interceptor cannot see, every attempt counts as
// sent; a retry policy that xDS delivers is not in the service config and
// the interceptor cannot see it: with xDS, retry with ClientOptions'
// MaxAttempts, not the channel's policy.
//
// # Streaming RPCs
//
// Streaming RPCs are not intercepted and pass through unprotected: a
// stream's messages are not one request and one answer that could be
// fingerprinted and replayed. Give a streaming method's effects keys of
// their own (idem.Engine.Do per message).
//
// A unary method whose request is not a protobuf message (another codec,
// or message types generated for golang/protobuf v1 or gogo) cannot be
// fingerprinted nor its answer stored: a call to it with a key (or under
// RequireKey) is refused with INVALID_ARGUMENT, never run unprotected; a
// call without a key passes through.
package idemgrpc
