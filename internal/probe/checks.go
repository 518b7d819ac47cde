package probe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

func (p *prober) run(ctx context.Context) (rep Report) {
	rep.Target = p.target
	add := func(f Finding) { rep.Findings = append(rep.Findings, f) }
	defer func() { rep.Requests = int(p.sent.Load()) }()

	first := p.sequential(ctx, add)
	if !first.ok() {
		for _, c := range []string{CheckReplayHeaders, CheckBurst, CheckRetryAfter, CheckMismatch, CheckFormOrder, CheckMissingKey, CheckLongKey, CheckDisconnect, CheckTenant} {
			add(Finding{Check: c, Verdict: Skipped, Observed: "the sample request did not succeed"})
		}
		return rep
	}
	add(p.replayHeaders())
	add(p.burst(ctx))
	add(p.retryAfter(first))
	other := p.mismatch(ctx, add)
	add(p.formOrder(ctx))
	// distinct: two executions under different keys answer differently, so
	// an identical answer to a new key is a replay, not a new execution.
	distinct := other.ok() && !other.same(first)
	add(p.missingKey(ctx))
	add(p.longKey(ctx))
	add(p.disconnect(ctx))
	add(p.tenant(ctx, distinct))
	return rep
}

// sequential sends the sample request three times, one after the other,
// with one key: the first executes and the others must replay it.
func (p *prober) sequential(ctx context.Context, add func(Finding)) answer {
	key := newKey()
	first := p.send(ctx, request{key: key, body: p.cfg.Body})
	if !first.ok() {
		add(Finding{Check: CheckSample, Verdict: Fail,
			Expected: "the sample request succeeds (2xx or 3xx) with a fresh key",
			Observed: "answered " + first.String() + excerpt(first)})
		return first
	}
	add(Finding{Check: CheckSample, Verdict: Pass, Expected: "the sample request succeeds with a fresh key", Observed: "answered " + first.String()})
	f := Finding{Check: CheckSequential,
		Expected: "every retry with the same key and payload gets the first response again (IETF); Stripe marks it Idempotent-Replayed: true"}
	answers := []string{first.String()}
	f.Verdict = Pass
	marked := 0
	for range 2 {
		a, _ := p.settle(ctx, request{key: key, body: p.cfg.Body})
		answers = append(answers, a.String())
		if !a.same(first) {
			f.Verdict = Fail
		}
		if a.replayed {
			marked++
		}
		p.replayPair = [2]answer{first, a}
	}
	p.markers = marked == 2
	f.Observed = "answers " + strings.Join(answers, ", ")
	if f.Verdict == Fail {
		f.Observed += ": a retry got a different response, so the request ran again or was not stored"
	} else if !p.markers {
		f.Observed += "; no Idempotent-Replayed marker, so clients cannot tell a replay"
	}
	add(f)
	return first
}

// burst sends Burst requests with one new key at once: at most one may
// execute; the others get its response or 409.
func (p *prober) burst(ctx context.Context) Finding {
	key := newKey()
	n := p.cfg.Burst
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = p.send(ctx, request{key: key, body: p.cfg.Body})
		})
	}
	close(start)
	wg.Wait()

	var conflicts, errs, failures, unmarked int
	var distinct []answer
	var retryAfter bool
	for _, a := range answers {
		switch {
		case a.err != nil:
			errs++
		case a.inFlight():
			p.conflicts = append(p.conflicts, a)
			conflicts++
			retryAfter = retryAfter || a.retryAfter != ""
		case a.status >= 500:
			failures++
		default:
			if !a.replayed {
				unmarked++
			}
			seen := false
			for _, d := range distinct {
				seen = seen || d.same(a)
			}
			if !seen {
				distinct = append(distinct, a)
			}
		}
	}
	executions := len(distinct)
	if p.markers {
		executions = max(executions, unmarked)
	}
	f := Finding{Check: CheckBurst,
		Expected: "one execution: the others replay it or get 409 Conflict, ideally with Retry-After (IETF)"}
	f.Observed = fmt.Sprintf("%d concurrent requests: %d distinct responses, %d not marked replayed, %d × 409 (Retry-After %s), %d × 5xx, %d errors",
		n, len(distinct), unmarked, conflicts, yesNo(conflicts > 0, retryAfter), failures, errs)
	switch {
	case executions > 1:
		f.Verdict = Fail
		f.Observed += fmt.Sprintf(": the request ran at least %d times", executions)
	case executions == 0:
		f.Verdict = Fail
		f.Observed += ": no request of the burst succeeded"
	case failures > 0 || errs > 0:
		f.Verdict = Fail
		f.Observed += ": concurrent requests failed instead of waiting or getting 409"
	default:
		f.Verdict = Pass
	}
	return f
}

func yesNo(applies, v bool) string {
	switch {
	case !applies:
		return "n/a"
	case v:
		return "set"
	}
	return "missing"
}

// mismatch sends the sample under a new key, then a different payload under
// the same key, which must be refused. It returns the first answer.
func (p *prober) mismatch(ctx context.Context, add func(Finding)) answer {
	key := newKey()
	first := p.send(ctx, request{key: key, body: p.cfg.Body})
	f := Finding{Check: CheckMismatch,
		Expected: "422 Unprocessable Content for the same key with a different payload (IETF; Stripe: 400 idempotency_error)"}
	if !first.ok() {
		f.Verdict, f.Observed = Skipped, "the sample request under a new key answered "+first.String()
		add(f)
		return first
	}
	a, _ := p.settle(ctx, request{key: key, body: p.cfg.AltBody})
	f.Observed = "answered " + a.String()
	switch {
	case a.err == nil && a.status == http.StatusUnprocessableEntity:
		f.Verdict = Pass
	case a.err == nil && a.status == http.StatusBadRequest:
		f.Verdict, f.Observed = Pass, f.Observed+" (Stripe's status; the IETF draft asks for 422)"
	case a.ok() && a.same(first):
		f.Verdict, f.Observed = Fail, f.Observed+": the first response was replayed for a different payload (no fingerprint check)"
	case a.ok():
		f.Verdict, f.Observed = Fail, f.Observed+": the different payload was accepted under a used key"
	default:
		f.Verdict = Fail
	}
	add(f)
	return first
}

func (p *prober) missingKey(ctx context.Context) Finding {
	a := p.send(ctx, request{body: p.cfg.Body})
	f := Finding{Check: CheckMissingKey,
		Expected: "400 with application/problem+json where the key is required (IETF); Stripe runs the request without one",
		Observed: "answered " + a.String()}
	switch {
	case a.err == nil && a.status == http.StatusBadRequest:
		f.Verdict = Pass
	case a.ok():
		f.Verdict, f.Observed = Note, f.Observed+": the key is optional, a request without one ran unprotected"
	case a.err == nil && a.status < 500:
		f.Verdict = Note
	default:
		f.Verdict, f.Observed = Fail, f.Observed+": the server failed on a request without a key"
	}
	return f
}

func (p *prober) longKey(ctx context.Context) Finding {
	a := p.send(ctx, request{key: strings.Repeat("k", longKeyLength), body: p.cfg.Body})
	f := Finding{Check: CheckLongKey,
		Expected: fmt.Sprintf("400 for a %d-character key (Stripe accepts at most 255)", longKeyLength),
		Observed: "answered " + a.String()}
	switch {
	case a.err == nil && a.status == http.StatusBadRequest:
		f.Verdict = Pass
	case a.err == nil && a.status < 500 && !a.ok():
		f.Verdict = Note
	case a.ok():
		f.Verdict, f.Observed = Fail, f.Observed+": the key was accepted and the request ran; unbounded keys let a client fill the store"
	default:
		f.Verdict, f.Observed = Fail, f.Observed+": the server failed on a long key"
	}
	return f
}

// disconnect sends the sample with a new key and drops the connection as
// soon as the request is written, then retries with the key: the retries
// must converge on one response, which the server must not have lost.
func (p *prober) disconnect(ctx context.Context) Finding {
	key := newKey()
	dctx, drop := context.WithCancel(ctx)
	dropped := p.send(dctx, request{key: key, body: p.cfg.Body, onWritten: drop})
	drop()
	f := Finding{Check: CheckDisconnect,
		Expected: "a retry after the client went away gets the stored response, or 409 until the first attempt ends, then the same response on every retry"}
	first, c1 := p.settle(ctx, request{key: key, body: p.cfg.Body})
	second, c2 := p.settle(ctx, request{key: key, body: p.cfg.Body})
	f.Observed = fmt.Sprintf("dropped request: %s; retries: %s, %s after %d × 409", dropped, first, second, c1+c2)
	switch {
	case !first.ok():
		f.Verdict, f.Observed = Fail, f.Observed+": the retry did not succeed"
	case !second.same(first):
		f.Verdict, f.Observed = Fail, f.Observed+": the retries got different responses, so the request ran more than once"
	default:
		f.Verdict = Pass
		if dropped.err == nil {
			f.Verdict, f.Observed = Note, f.Observed+": the server answered before the disconnect, so this was a plain retry"
		}
	}
	return f
}

// tenant sends the sample with one key under each credential: the second
// must execute on its own, not replay the first's response nor be refused
// because the other client used the key. distinct says whether two
// executions are told apart by their responses.
func (p *prober) tenant(ctx context.Context, distinct bool) Finding {
	f := Finding{Check: CheckTenant,
		Expected: "the same key from two clients runs twice and never replays across them (IETF security considerations; Stripe scopes keys per account)"}
	a0, a1 := p.cfg.Credentials[0], p.cfg.Credentials[1]
	if a0 == "" || a1 == "" {
		f.Verdict, f.Observed = Skipped, "no two credentials given"
		return f
	}
	if a0 == a1 {
		f.Verdict, f.Observed = Skipped, "the two credentials are the same"
		return f
	}
	key := newKey()
	r0, _ := p.settle(ctx, request{key: key, body: p.cfg.Body, credential: a0})
	r1 := p.send(ctx, request{key: key, body: p.cfg.Body, credential: a1})
	f.Observed = fmt.Sprintf("first client: %s; second client, same key: %s", r0, r1)
	switch {
	case !r0.ok():
		f.Verdict, f.Observed = Skipped, f.Observed+": the first client's request did not succeed"
	case r1.replayed:
		f.Verdict, f.Observed = Fail, f.Observed+": the second client got the first client's response"
	case r1.err == nil && (r1.status == http.StatusConflict || r1.status == http.StatusUnprocessableEntity):
		f.Verdict, f.Observed = Fail, f.Observed+": the second client was refused because of the first client's key"
	case distinct && r1.same(r0):
		f.Verdict, f.Observed = Fail, f.Observed+": the second client got the first client's response"
	case !r1.ok():
		f.Verdict, f.Observed = Note, f.Observed+": the second credential was not accepted"
	default:
		f.Verdict = Pass
		if !distinct {
			f.Observed += " (responses of two executions are identical, so only the replay marker tells)"
		}
	}
	return f
}
