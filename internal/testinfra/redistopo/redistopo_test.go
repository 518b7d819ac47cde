package redistopo_test

import (
	"testing"

	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The expected slots are the ones Redis documents and CLUSTER KEYSLOT
// returns (the store's tests compare Slot with CLUSTER KEYSLOT as well).
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739, // the CRC16/XMODEM check value 0x31C3
		"foo":                  12182,
		"{user1000}.following": redistopo.Slot("user1000"),
		"{}x":                  redistopo.Slot("{}x"), // an empty tag hashes the whole key
		"a{b}c{d}":             redistopo.Slot("b"),
	} {
		if got := redistopo.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if redistopo.Slot("{}x") == redistopo.Slot("x") {
		t.Error("Slot treated an empty hash tag as a tag")
	}
}

// startServer starts a server with Start, the way a program without a
