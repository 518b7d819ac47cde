// The wrapper of docs/library.md's Do fragment for jobs (see TestDocSnippets).
package main

import (
	"context"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/store/memstore"
)

// message is a job or a message, keyed by its ID.
type message struct{ ID, Digest string }

func chargeCard(ctx context.Context, msg message, fence int64) ([]byte, error) {
	return []byte("ch_1"), nil
}

func main() {
	ctx := context.Background()
	s, _ := memstore.New(nil)
	engine, _ := idem.New(s, nil)
	msg := message{ID: "msg-1", Digest: "sha256:..."}
	// SNIPPET
	_, _, _ = out, replayed, err
}
