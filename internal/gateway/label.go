package gateway

import (
	"net/http"

	"github.com/idemkit/idem/store"
)

// requestLabel returns the label a route's requests leave in their keys'
// records (store.Record.Label), which the admin API and the console show
// for an UNKNOWN key: the method, the path as sent, and the route's name
// (its pattern when it has none; nothing for the requests no route
// matches), e.g. "POST /v1/orders/42 route=orders". Never the query,
// which may carry a secret, nor any header. The path is cut so that the
// whole fits in store.MaxLabelLength bytes.
func requestLabel(rt Route) func(*http.Request) string {
	route := rt.Name
	if route == "" {
		route = rt.Pattern
	}
	if route != "" {
		route = " route=" + route
	}
	return func(r *http.Request) string {
		path := r.URL.EscapedPath() // ASCII: cut anywhere
		if room := store.MaxLabelLength - len(r.Method) - 1 - len(route); len(path) > room {
			path = path[:max(0, room)]
		}
		return r.Method + " " + path + route
	}
}
