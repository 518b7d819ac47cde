// The wrapper of docs/library.md's middleware fragment (see TestDocSnippets).
package main

import (
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

var payments http.Handler // your handler

func main() {
	s, _ := memstore.New(nil)
	// SNIPPET
	_ = err
}

var _ = idem.New
var _ = idemhttp.New
