// Package counts parses the comma-separated lists of counts that the
// bench programs take as flags (-concurrency 1,8,64).
package counts

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse parses "1, 2,4" into its counts, each at least least.
func Parse(s string, least int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("%q is not a count of at least %d", f, least)
		}
		out = append(out, n)
	}
	return out, nil
}
