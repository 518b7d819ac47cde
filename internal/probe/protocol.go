package probe

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

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
