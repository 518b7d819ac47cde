// module: examples/natsconsumer
// The wrapper of the NATS fragments of docs/library.md and docs/consumers.md
// (see TestDocSnippets), built in the natsconsumer module.
package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/natsconsumer"
	"github.com/idemkit/idem/store/memstore"
)

var (
	js      jetstream.JetStream
	durable jetstream.Consumer
	body    []byte
)

func main() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	redisStore, _ := memstore.New(nil) // a Redis store in production
	// SNIPPET
}

var (
	_ = idem.New
	_ = natsconsumer.New
)
