package redisstore_test

import (
	"testing"

	"github.com/idemkit/idem/store/redisstore"
)

func TestParseAcquired(t *testing.T) {
	for _, tc := range []struct {
		in          string
		fence, at   int64
		took, valid bool
	}{
		{"12:34", 12, 34, false, true},
		{"1700000000123456:1700000000123:1699999999000000:1699999999000", 1700000000123456, 1700000000123, true, true},
		{"", 0, 0, false, false},
		{"12", 0, 0, false, false},
		{"12:", 0, 0, false, false},
		{"1:2:3", 0, 0, false, false},
		{"1:2:3:4:5", 0, 0, false, false},
		{"1:x", 0, 0, false, false},
	} {
		fence, at, took, err := redisstore.ParseAcquired(tc.in)
		if (err == nil) != tc.valid || (tc.valid && (fence != tc.fence || at != tc.at || (took != nil) != tc.took)) {
			t.Errorf("parseAcquired(%q) = %d, %d, %+v, %v; want %d, %d, takeover %t, valid %t", tc.in, fence, at, took, err, tc.fence, tc.at, tc.took, tc.valid)
		}
	}
}
