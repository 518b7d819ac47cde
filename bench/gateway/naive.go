package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// naiveGateway is the gateway a team writes instead of idem, plainly: the
// article's `SET key LOCKED NX EX 30`, forward, `SET` the status and body
// for 24 hours; a taken key is read back and replayed, or answered 409
// while it still says LOCKED. It has no owner or fence (a slow request
// whose lock expired overwrites another's result), no fingerprint, no
// UNKNOWN state and no tenant: it is the peer for speed, not for safety.
type naiveGateway struct {
	rdb      *redis.Client
	upstream *url.URL
	client   *http.Client
	prefix   string
}

func newNaiveGateway(rdb *redis.Client, upstream *url.URL, t http.RoundTripper, prefix string) *naiveGateway {
	return &naiveGateway{rdb: rdb, upstream: upstream, client: &http.Client{Transport: t}, prefix: prefix}
}

type stored struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Body        []byte `json:"body"`
}

func (g *naiveGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	rk := g.prefix + key
	ok, err := g.rdb.SetNX(ctx, rk, "LOCKED", 30*time.Second).Result()
	if err != nil {
		http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !ok {
		v, err := g.rdb.Get(ctx, rk).Bytes()
		var s stored
		if errors.Is(err, redis.Nil) || (err == nil && string(v) == "LOCKED") {
			http.Error(w, "a request with this key is in progress", http.StatusConflict)
			return
		}
		if err == nil {
			err = json.Unmarshal(v, &s)
		}
		if err != nil {
			http.Error(w, "stored result: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", s.ContentType)
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(s.Status)
		w.Write(s.Body)
		return
	}

	body, err := io.ReadAll(r.Body)
	if err != nil {
		g.rdb.Del(ctx, rk)
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	u := *g.upstream
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	out, _ := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	out.Header = r.Header.Clone()
	resp, err := g.client.Do(out)
	if err != nil {
		g.rdb.Del(ctx, rk)
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		g.rdb.Del(ctx, rk)
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	s := stored{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: respBody}
	v, _ := json.Marshal(s)
	if err := g.rdb.Set(ctx, rk, v, 24*time.Hour).Err(); err != nil {
		http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", s.ContentType)
	w.WriteHeader(s.Status)
	w.Write(respBody)
}
