package redisrecord

import "testing"

func TestPrefix(t *testing.T) {
	if p, err := Prefix("", "idem:"); p != "idem:" || err != nil {
		t.Errorf(`Prefix("", "idem:") = %q, %v; want the default`, p, err)
	}
	if p, err := Prefix("app:", "idem:"); p != "app:" || err != nil {
		t.Errorf(`Prefix("app:", "idem:") = %q, %v; want "app:"`, p, err)
	}
	for _, bad := range []string{"a{b", "a}b", "{}"} {
		if _, err := Prefix(bad, "idem:"); err == nil {
			t.Errorf("Prefix(%q) = nil error; want one: a brace breaks the hash tag", bad)
		}
	}
}

// The Redis Cluster specification's check value: CRC16("123456789") is
// 0x31C3, and a hash tag stands for its key.
func TestSlot(t *testing.T) {
	if got := Slot("123456789"); got != 0x31C3%16384 {
		t.Errorf("Slot(123456789) = %d; want %d", got, 0x31C3%16384)
	}
	if Slot("{user1000}.following") != Slot("user1000") {
		t.Error("a hash tag does not stand for its key")
	}
}
