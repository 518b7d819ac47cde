package probe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type prober struct {
	cfg       Config
	target    string
	transport *http.Transport
	client    *http.Client
	sent      atomic.Int32
	// markers is set once the server is seen marking replays, so that an
	// unmarked answer to a used key counts as an execution.
	markers bool
	// replayPair is the sample's first answer and a replay of it, for the
	// replay-headers check; conflicts are the burst's 409s, for the
	// retry-after check.
	replayPair [2]answer
	conflicts  []answer
}

// answer is what the server said to one request.
type answer struct {
	status     int
	body       []byte
	replayed   bool
	retryAfter string
	header     http.Header
	took       time.Duration // from sending to the end of the body
	key        string        // the Idempotency-Key sent
	err        error
}

// same reports whether a and b are the same answer: a replay, or an
// execution that produced an identical response.
func (a answer) same(b answer) bool {
	return a.err == nil && b.err == nil && a.status == b.status && bytes.Equal(a.body, b.body)
}

func (a answer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	s := strconv.Itoa(a.status)
	if a.replayed {
		s += " replayed"
	}
	if a.retryAfter != "" {
		s += " Retry-After=" + a.retryAfter
	}
	return s
}

// inFlight reports whether a says the key's request is still running: 409
// (IETF), or 429 with Retry-After (what Stripe's SDKs retry).
func (a answer) inFlight() bool {
	return a.err == nil && (a.status == http.StatusConflict || (a.status == http.StatusTooManyRequests && a.retryAfter != ""))
}

func (a answer) ok() bool { return a.err == nil && a.status >= 200 && a.status < 400 }

// request describes one request the probe sends.
type request struct {
	key        string // "" sends no Idempotency-Key
	body       []byte
	credential string // "" keeps Config.Header's
	// onWritten, if set, is called once the request is written.
	onWritten func()
}

func (p *prober) send(ctx context.Context, r request) answer {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if r.onWritten != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { r.onWritten() },
		})
	}
	req, err := http.NewRequestWithContext(ctx, p.cfg.Method, p.target, bytes.NewReader(r.body))
	if err != nil {
		return answer{err: err}
	}
	for name, vs := range p.cfg.Header {
		req.Header[name] = append([]string(nil), vs...)
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	if r.credential != "" {
		req.Header.Set(p.cfg.CredentialHeader, r.credential)
	}
	p.sent.Add(1)
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	return answer{
		status:     resp.StatusCode,
		body:       body,
		replayed:   strings.EqualFold(strings.TrimSpace(resp.Header.Get("Idempotent-Replayed")), "true"),
		retryAfter: resp.Header.Get("Retry-After"),
		header:     resp.Header,
		took:       time.Since(start),
		key:        r.key,
		err:        err,
	}
}

// settle sends r until the answer is not a 409, waiting as Retry-After asks
// (capped), at most five times. It returns the last answer and how many
// 409s it waited out.
func (p *prober) settle(ctx context.Context, r request) (answer, int) {
	conflicts := 0
	for {
		a := p.send(ctx, r)
		if a.err != nil || !a.inFlight() || conflicts == 4 {
			return a, conflicts
		}
		conflicts++
		wait := 100 * time.Millisecond
		if secs, err := strconv.Atoi(strings.TrimSpace(a.retryAfter)); err == nil && secs >= 0 {
			wait = min(time.Duration(secs)*time.Second, maxWait)
		}
		if err := p.cfg.Sleep(ctx, wait); err != nil {
			return answer{err: err}, conflicts
		}
	}
}

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

// excerpt returns the start of a's body, for a finding about a failure.
func excerpt(a answer) string {
	if a.err != nil || len(a.body) == 0 {
		return ""
	}
	b := a.body
	if len(b) > 200 {
		b = b[:200]
	}
	return ": " + strconv.Quote(string(b))
}

// requestIDHeaders are the response headers that identify a request, which
// clients log and SDKs read back (Stripe's read Request-Id).
var requestIDHeaders = []string{"Request-Id", "X-Request-Id", "X-Correlation-Id"}

// replayHeaders compares the sample's first answer with its replay: a
// request id the first carried must come back unchanged, the key should
// be echoed as Stripe does, and a Set-Cookie must never be replayed.
func (p *prober) replayHeaders() Finding {
	f := Finding{Check: CheckReplayHeaders,
		Expected: "a replay carries the original request id (Request-Id, X-Request-Id) and echoes Idempotency-Key, as Stripe's do; never the first response's Set-Cookie"}
	first, replay := p.replayPair[0], p.replayPair[1]
	if first.err != nil || replay.err != nil || first.header == nil || replay.header == nil {
		f.Verdict, f.Observed = Skipped, "no replay to compare"
		return f
	}
	var seen, lost []string
	for _, name := range requestIDHeaders {
		if v := first.header.Get(name); v != "" {
			seen = append(seen, name)
			if replay.header.Get(name) != v {
				lost = append(lost, fmt.Sprintf("%s %q became %q", name, v, replay.header.Get(name)))
			}
		}
	}
	echo := replay.header.Get("Idempotency-Key")
	f.Observed = fmt.Sprintf("request id headers on the first answer: %v; Idempotency-Key on the replay: %q", seen, echo)
	switch {
	case first.header.Get("Set-Cookie") != "" && replay.header.Get("Set-Cookie") == first.header.Get("Set-Cookie"):
		f.Verdict, f.Observed = Fail, f.Observed+": the replay carries the first response's Set-Cookie, a session of another request"
	case len(lost) > 0:
		f.Verdict, f.Observed = Note, f.Observed+": "+strings.Join(lost, ", ")+"; clients cannot match the replay to the original"
	case echo != replay.key:
		f.Verdict, f.Observed = Note, f.Observed+": the key is not echoed, so an SDK's idempotency key of the response is empty"
	case len(seen) == 0:
		f.Verdict, f.Observed = Note, f.Observed+" (the target sends no request id, so only the key echo is checked)"
	default:
		f.Verdict = Pass
	}
	return f
}

// retryAfter judges the Retry-After of the burst's 409s against how long
// the sample request took: a client that honours it should come back
// about when the answer is ready, not when a 30s lease would end.
func (p *prober) retryAfter(sample answer) Finding {
	f := Finding{Check: CheckRetryAfter,
		Expected: "the Retry-After of a 409 is about the time the request takes, at least 1s (not the time left on a lease)"}
	if len(p.conflicts) == 0 {
		f.Verdict, f.Observed = Skipped, "the burst got no 409"
		return f
	}
	longest, missing := 0, 0
	for _, a := range p.conflicts {
		secs, err := strconv.Atoi(strings.TrimSpace(a.retryAfter))
		if err != nil {
			missing++
			continue
		}
		longest = max(longest, secs)
	}
	bound := max(2, int((3*sample.took+time.Second-1)/time.Second))
	f.Observed = fmt.Sprintf("%d in-flight answers (409, or 429 in Stripe's format): longest Retry-After %ds (%d missing or not seconds); the sample took %v", len(p.conflicts), longest, missing, sample.took.Round(time.Millisecond))
	switch {
	case missing == len(p.conflicts):
		f.Verdict, f.Observed = Note, f.Observed+": no usable Retry-After"
	case longest > bound:
		f.Verdict, f.Observed = Note, f.Observed+fmt.Sprintf(": over %ds, a client that honours it waits long after the answer is ready", bound)
	default:
		f.Verdict = Pass
	}
	return f
}

// formOrder sends a form sample under a new key, then the same parameters
// in another order and percent-encoding: a server that decodes forms
// replays; one that hashes the bytes refuses it, although the request is
// the same (Stripe's SDKs write parameters in the order they are given).
func (p *prober) formOrder(ctx context.Context) Finding {
	f := Finding{Check: CheckFormOrder,
		Expected: "a form body (application/x-www-form-urlencoded) with its parameters in another order, or other percent-encodings, is the same request: it replays"}
	ct := p.cfg.Header.Get("Content-Type")
	if !strings.HasPrefix(strings.ToLower(ct), "application/x-www-form-urlencoded") {
		f.Verdict, f.Observed = Skipped, "the sample request is not a form (use --content-type application/x-www-form-urlencoded)"
		return f
	}
	other, ok := reorderForm(string(p.cfg.Body))
	if !ok {
		f.Verdict, f.Observed = Skipped, "the sample form does not decode"
		return f
	}
	key := newKey()
	first := p.send(ctx, request{key: key, body: p.cfg.Body})
	if !first.ok() {
		f.Verdict, f.Observed = Skipped, "the sample request under a new key answered "+first.String()
		return f
	}
	a, _ := p.settle(ctx, request{key: key, body: []byte(other)})
	f.Observed = fmt.Sprintf("%q then %q: answered %s", p.cfg.Body, other, a)
	switch {
	case a.ok() && a.same(first):
		f.Verdict = Pass
	case a.ok():
		f.Verdict, f.Observed = Fail, f.Observed+": the same request under a used key ran again"
	case a.err == nil && (a.status == http.StatusUnprocessableEntity || a.status == http.StatusBadRequest):
		f.Verdict, f.Observed = Note, f.Observed+": the body is compared byte for byte, so a client that orders its parameters differently on a retry is refused"
	default:
		f.Verdict = Fail
	}
	return f
}

// reorderForm writes the pairs of a form body with the distinct names in
// reverse order (the values of one name keep theirs) and every name byte
// percent-encoded: the same form, other bytes.
func reorderForm(body string) (string, bool) {
	var names []string
	values := map[string][]string{}
	for pair := range strings.SplitSeq(body, "&") {
		if pair == "" {
			continue
		}
		rn, rv, _ := strings.Cut(pair, "=")
		n, err1 := url.QueryUnescape(rn)
		v, err2 := url.QueryUnescape(rv)
		if err1 != nil || err2 != nil || strings.Contains(n, "[]") {
			return "", false // unindexed arrays keep their order
		}
		if _, ok := values[n]; !ok {
			names = append(names, n)
		}
		values[n] = append(values[n], v)
	}
	if len(names) == 0 {
		return "", false
	}
	var b strings.Builder
	for i := len(names) - 1; i >= 0; i-- {
		for _, v := range values[names[i]] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			for _, c := range []byte(names[i]) {
				fmt.Fprintf(&b, "%%%02X", c)
			}
			b.WriteString("=" + url.QueryEscape(v))
		}
	}
	return b.String(), true
}
