package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// beganKey is the context key a test marks Begin's context with.
type beganKey struct{}

// began is one Began call.
type began struct {
	id       idem.ID
	decision idem.Decision
	fence    int64
	mark     any // the value of beganKey in the context Began was told
}

type beganObserver struct{ calls []began }

func (*beganObserver) StoreCall(context.Context, string, time.Duration, error) {}
func (*beganObserver) LeaseEvent(idem.ID, idem.LeaseEvent)                     {}
func (o *beganObserver) Began(ctx context.Context, id idem.ID, d idem.Decision, fence int64) {
	o.calls = append(o.calls, began{id, d, fence, ctx.Value(beganKey{})})
}

// Issue 36, item 2: a BeginObserver learns what each Begin decided, with
// the attempt's fence, on Begin's context: what a gateway's access log
// and trace span need of a request (its key, its decision, its fence).
func TestBeginObserverIsToldEachDecision(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := &beganObserver{}
	e, err := idem.New(s, &idem.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), beganKey{}, "request-1")
	req := idem.Request{Tenant: "acme", Key: "k-1", Fingerprint: "f1"}
	att, err := e.Begin(ctx, req)
	if err != nil || att.Outcome != idem.Acquired {
		t.Fatalf("Begin = %v, %v; want Acquired", att.Outcome, err)
	}
	fence := att.Lease.Fence()
	if err := att.Lease.Complete(ctx, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	e.Begin(ctx, req) // replayed
	req.Fingerprint = "f2"
	e.Begin(ctx, req) // mismatch
	if _, err := e.Begin(ctx, idem.Request{Tenant: "acme", Key: "", Fingerprint: "f1"}); err == nil {
		t.Fatal("Begin with an empty key did not fail")
	}
	want := []began{{req.ID(), idem.Acquired, fence, "request-1"}, {req.ID(), idem.Replayed, fence, "request-1"},
		{req.ID(), idem.Mismatch, fence, "request-1"}}
	if len(obs.calls) != len(want) {
		t.Fatalf("Began calls %+v; want %+v (none for the Begin that failed)", obs.calls, want)
	}
	for i := range want {
		if obs.calls[i] != want[i] {
			t.Errorf("Began call %d = %+v; want %+v", i, obs.calls[i], want[i])
		}
	}
}
