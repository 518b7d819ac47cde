// The wrapper of docs/guardrail.md's fragment (see TestDocSnippets).
package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/store/pgstore"
)

// provider is the payment provider's client, which takes an idempotency key.
type provider interface {
	Charge(ctx context.Context, req chargeRequest, idempotencyKey string) ([]byte, error)
}

type chargeRequest struct{ Amount int }

func main() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	pg, _ := pgstore.New(pool, nil)
	engine, _ := idem.New(pg, nil)
	key := idem.Request{Tenant: "acme", Key: "order-42", Fingerprint: "POST /charges amount=4200"}
	var provider provider
	req := chargeRequest{Amount: 4200}
	// SNIPPET
	_, _, _ = out, replayed, err
}

var (
	_ pgx.Tx
	_ = idemclient.StepKey
)
