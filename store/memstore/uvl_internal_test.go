package memstore

import (
	"encoding/binary"
	"testing"
)

func TestUvarintLen(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 1 << 21, 1<<28 - 1, 1 << 40} {
		if got, want := uvarintLen(n), len(binary.AppendUvarint(nil, uint64(n))); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", n, got, want)
		}
	}
}
