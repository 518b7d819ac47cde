// The wrapper of docs/library.md's idemgrpc fragment (see TestDocSnippets).
package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
)

// auth is the application's own authentication.
var auth struct {
	CallerFrom func(ctx context.Context) (string, bool)
}

var (
	authInterceptor grpc.UnaryServerInterceptor
	target          = "127.0.0.1:50051"
	creds           = grpc.WithTransportCredentials(insecure.NewCredentials())
	method          = "/payments.Payments/Refund"
	req, resp       = wrapperspb.String("42"), new(wrapperspb.StringValue)
)

func main() {
	ctx := context.Background()
	store, _ := memstore.New(nil)
	// SNIPPET
	_, _ = srv, err
}

var _ = idem.New
var _ = idemgrpc.WithKey
