package valuectx

import (
	"context"
	"testing"
)

type (
	carriedKey   struct{}
	otherKey     struct{}
	unrelatedKey struct{}
)

func TestValueFindsTheCarriedValueThroughDerivedContexts(t *testing.T) {
	v := new(int)
	parent := context.WithValue(context.Background(), otherKey{}, "parent's")
	c := &Context[carriedKey, *int]{Context: parent, Carried: v}
	ctx, cancel := context.WithCancel(context.WithValue(c, unrelatedKey{}, 1))
	defer cancel()
	if got, ok := ctx.Value(carriedKey{}).(*int); !ok || got != v {
		t.Fatalf("Value(carriedKey{}) = %v; want the carried value", ctx.Value(carriedKey{}))
	}
	if got := ctx.Value(otherKey{}); got != "parent's" {
		t.Fatalf("Value(otherKey{}) = %v; want the parent's value", got)
	}
	if got := context.Background().Value(carriedKey{}); got != nil {
		t.Fatalf("a context without it carries %v", got)
	}
}
