package handlerctx

import (
	"context"
	"testing"
)

type otherKey struct{}

func TestSetReachesTheCallsOverride(t *testing.T) {
	if Set(context.Background(), Unknown, "x") {
		t.Fatal("Set on a context that is no handler's = true; want false")
	}
	var o Override
	ctx := context.WithValue(&Context{Context: context.Background(), Carried: &o}, otherKey{}, 1) // a context derived from it
	if Set(ctx, Disposition(9), "x") {
		t.Fatal("Set of a value that is no disposition = true; want false")
	}
	if d, _ := o.Get(); d != 0 {
		t.Fatalf("after refused Sets the override is %v; want none", d)
	}
	if !Set(ctx, Release, "first") || !Set(ctx, Unknown, "sent, not answered") {
		t.Fatal("Set on a handler's context = false")
	}
	if d, reason := o.Get(); d != Unknown || reason != "sent, not answered" {
		t.Fatalf("Get = %v %q; want the last Set", d, reason)
	}
	if got := Store.String() + " " + Release.String() + " " + Unknown.String() + " " + Disposition(7).String(); got != "store release unknown Disposition(7)" {
		t.Fatalf("names = %q", got)
	}
}

func TestStepSentCountsStepsNotProvedUnsent(t *testing.T) {
	if o := BeginStep(context.Background()); o != nil {
		t.Fatal("BeginStep on a context that is no handler's returned an Override")
	}
	var nilOverride *Override
	nilOverride.NotSent() // does nothing
	var o Override
	ctx := context.WithValue(&Context{Context: context.Background(), Carried: &o}, otherKey{}, 1)
	if o.StepSent() {
		t.Fatal("StepSent before any step = true")
	}
	BeginStep(ctx).NotSent()
	if o.StepSent() {
		t.Fatal("StepSent after a step that never left = true")
	}
	pending := BeginStep(ctx) // under way: counts as sent
	if !o.StepSent() {
		t.Fatal("StepSent with a step under way = false")
	}
	BeginStep(ctx) // this one was sent
	pending.NotSent()
	if !o.StepSent() {
		t.Fatal("StepSent after a sent step = false")
	}
}
