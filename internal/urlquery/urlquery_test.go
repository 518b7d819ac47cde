package urlquery

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWithout(t *testing.T) {
	for _, c := range []struct{ query, want string }{
		{"prefix=p", ""},
		{"prefix=p&near_cache=&client=rueidis", "near_cache="},
		{"z=1&prefix=p&a=%41", "z=1&a=%41"},        // the rest as written: not sorted, not re-encoded
		{"pre%66ix=p&a=1", "a=1"},                  // a name is compared unescaped
		{"prefixes=1&prefix", "prefixes=1"},        // a whole name, with or without a value
		{"client=go-redis&coalesce=on&x=1", "x=1"}, // several names
		{"a=1", "a=1"},
	} {
		if got := Without(c.query, "prefix", "client", "coalesce"); got != c.want {
			t.Errorf("Without(%q) = %q; want %q", c.query, got, c.want)
		}
	}
}
