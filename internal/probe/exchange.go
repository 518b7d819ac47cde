package probe

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// A prober sends the probe's requests to one target and keeps the answers
// that later checks compare.
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
