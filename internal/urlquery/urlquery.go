// Package urlquery takes parameters out of a URL's query as its user
// wrote it: a store URL's own options, which its driver does not read.
package urlquery

import (
	"net/url"
	"slices"
	"strings"
)

// Without returns query less the pairs whose name, unescaped, is one of
// names. The other pairs stay as written and in their order (url.Values
// would re-encode and sort them), so that an error quoting the URL shows
// what its user wrote, less those parameters.
func Without(query string, names ...string) string {
	var kept []string
	for _, pair := range strings.Split(query, "&") {
		name, _, _ := strings.Cut(pair, "=")
		if name, err := url.QueryUnescape(name); err != nil || !slices.Contains(names, name) {
			kept = append(kept, pair)
		}
	}
	return strings.Join(kept, "&")
}
