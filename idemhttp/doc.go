// Package idemhttp gives net/http handlers the Idempotency-Key protocol
// (IETF draft-ietf-httpapi-idempotency-key-header, with Stripe's replay
// marker) on an idem.Engine. It works with plain net/http, chi, gorilla/mux
// and any router that takes an http.Handler:
//
//	mw, err := idemhttp.New(engine, nil)
//	...
//	http.Handle("POST /payments", mw(payments))
//
// # What a request gets
//
// Requests with a method in Options.Methods (POST and PATCH by default; GET
// brings HEAD, which runs the GET handler) and an Idempotency-Key header
// are protected; others pass through untouched
// (with Options.RequireKey a protected method without a key gets 400). The
// body is read once, up to Options.MaxBody (413 beyond, before any key is
// taken), fingerprinted, and handed on intact. Then, per (tenant, key):
//
//   - first request: the handler runs under a lease (checked right before
//     it starts: a lease that already ended answers 503 lease_lost and
//     releases the key); its response is stored, or the key released, or
//     marked UNKNOWN, as Options.StatusPolicy says for the status (by
//     default: 425, 429 and the refusals before any work, 401, 403,
//     413 and the like, release, 408, 502, 503 and 504 are unknown, the rest is
//     stored; a release is unknown after the handler sent a downstream
//     step, a request with a key derived from its scope through
//     idemclient.Propagator or Retrying that may have left) unless the
//     handler declared otherwise with SetDisposition; a
//     downstream idem service's 409 key_in_flight passed on (or Stripe's
//     409 idempotency_key_in_use) makes the key UNKNOWN whatever the
//     policy says: the downstream work may complete; a
//     panic in the handler, or in recording its result before it was
//     recorded, makes the key UNKNOWN (a panicking StatusPolicy stores the
//     response);
//   - a retry of an UNKNOWN key: 503 outcome_unknown; the handler never
//     runs again until the outcome is reconciled or resolved. Retry-After
//     is there only when something may settle the key by itself: the
//     engine's reconciliation (its ReconcileTimeout) or
//     Options.UnknownRetryAfter; without either, no retry helps until an
//     operator resolves the key, and none is invited (the policy of
//     idemgrpc and idemclient.Retrying too);
//   - a retry after that: the stored status, body and a safe subset of
//     headers, marked Idempotent-Replayed: true;
//   - a retry while the first still runs: 409 with Retry-After (about the
//     time the route's recent executions took, at most the lease left), or,
//     with Options.Wait, a wait for the result;
//   - the same key with a different fingerprint: 422 (Options.MismatchStatus);
//   - a retry after the response's retention, within the key retention
//     (Options.KeyRetention, idem.Options.KeyRetention): 410 key_expired
//     with the completion time and the original status; the handler never
//     runs again for it;
//   - an invalid key (empty, over 255 characters, not printable ASCII, sent
//     twice): 400;
//   - the store unreachable or not answering within the engine's
//     StoreTimeout: 503 store_unavailable, the handler does not run (fail
//     closed), unless Options.FailOpen;
//   - the store failing after the handler ran: the engine holds the
//     response and stores it when the store answers again (idem.Options
//     MaxHeld), and a retry that reaches this process meanwhile gets it
//     replayed.
//
// Every answer to a keyed request carries Idempotency-Expiry (HeaderExpiry):
// how long responses and keys are kept. With Options.Repeatability, OASIS
// Repeatable Requests (Repeatability-Request-ID) are keyed requests too.
//
// Every error is an application/problem+json body (RFC 9457) with a stable
// `code` member (the Code constants) and Cache-Control: no-store; see
// WriteProblem. Options.ErrorFormat = ErrorFormatStripe writes Stripe's
// error object instead, with the statuses Stripe's SDKs act on (a key in
// flight is then 429 lock_timeout, a mismatch 400); see WriteStripeError.
//
// # Tenants
//
// Keys are scoped per tenant, so one client can never replay another's
// response. By default the tenant is the SHA-256 of the Authorization header,
// and a keyed request without one gets 400 tenant_missing (Options.
// AllowAnonymous puts such requests in one scope shared by every anonymous
// client instead); Options.TenantHeader trusts a header set by your
// authenticating proxy; Options.Tenant takes any function of the request.
//
// # The handler's context and lease
//
// The handler runs on the lease's context: it is cancelled when the lease
// can no longer be held (a renewal found it taken over or deleted, or the
// store stayed unreachable until the lease ran out), so the handler can stop
// before its side effects. It is NOT cancelled when the client disconnects:
// work that started runs to completion and is recorded, so the client's
// retry gets the replay. idem.LeaseFromContext returns the lease, whose fence the
// handler passes on with its writes. A lease lost by the time the handler
// returns is logged by the engine and reported as OutcomeLeaseLost; the
// record of the new owner is never overwritten.
//
// # Responses that cannot be replayed
//
// A handler that hijacks the connection, or whose response grows past
// Options.MaxResponseBuffer (it streams on to the client unbuffered), has
// run, and must never run again for that key; but there is nothing byte-exact
// to replay. The key is then stored as COMPLETED with a "not replayable"
// marker for its retention, and retries get 422 with code not_replayable:
// a 4xx that retrying clients do not retry, saying that the request was
// processed. (A streamed response whose status is retryable by the Store
// policy still releases the key.)
//
// # Per-route options
//
// Each call of New makes an independent middleware; wrap a route or a
// sub-router with one of its own to give it another lease, retention,
// RequireKey or methods.
package idemhttp
