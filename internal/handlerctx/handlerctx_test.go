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
