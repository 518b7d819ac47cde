// Package valuectx is context.WithValue without an allocation of its own:
// a context that carries one value under a key type of the caller's, and
// that a struct can hold as a field, so that carrying the value costs
// nothing beyond the struct. The engine's lease (idem.LeaseFromContext)
// and a protected handler's declared disposition (internal/handlerctx)
// ride on it.
package valuectx

import "context"

// Context is the embedded Context with Carried as the value of every key
// of type K (a private, empty struct type of the caller's), so that
// ctx.Value(K{}) finds Carried from Context and every context made from it.
type Context[K, V any] struct {
	context.Context
	Carried V
}

// Value returns Carried for a key of type K, else what the embedded
// Context holds.
func (c *Context[K, V]) Value(key any) any {
	if _, ok := key.(K); ok {
		return c.Carried
	}
	return c.Context.Value(key)
}
