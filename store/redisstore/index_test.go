package redisstore

import (
	"testing"

	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
)

// TestSlot checks the Cluster slot function against the CRC16 check value
// of the Redis Cluster specification and its hash tag rules, and that the
// index of every slot is in that slot.
func TestSlot(t *testing.T) {
	// The specification's check value: CRC16("123456789") is 0x31C3.
	if got := redisrecord.Slot("123456789"); got != 0x31C3%clusterSlots {
		t.Fatalf("Slot(123456789) = %d; want %d (CRC16 0x31c3 modulo 16384)", got, 0x31C3%clusterSlots)
	}
	for _, c := range []struct{ a, b string }{
		{"{user1000}.following", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // an empty tag: the whole key
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
	} {
		if redisrecord.Slot(c.a) != redisrecord.Slot(c.b) {
			t.Errorf("redisrecord.Slot(%q) = %d, redisrecord.Slot(%q) = %d; want equal", c.a, redisrecord.Slot(c.a), c.b, redisrecord.Slot(c.b))
		}
	}
	x := newIndex("p:", indexPerSlot)
	for i := range clusterSlots {
		if s := redisrecord.Slot(x.key(i)); s != i {
			t.Fatalf("index %d has key %q in slot %d", i, x.key(i), s)
		}
	}
	rec := "p:{4:acme:order-42}"
	if redisrecord.Slot(x.keyOf(rec)) != redisrecord.Slot(rec) {
		t.Fatalf("the index of %q is not in its slot", rec)
	}
}

func TestMember(t *testing.T) {
	for _, id := range []store.ID{{Tenant: "a:b", Key: "c"}, {Tenant: "a", Key: "b:c"}, {Tenant: "", Key: "k"}, {Tenant: "t", Key: "x}y"}} {
		got, ok := parseMember(member(id))
		if !ok || got != id {
			t.Errorf("parseMember(member(%+v)) = %+v, %v", id, got, ok)
		}
	}
	for _, bad := range []string{"", "x", "3:ab", "-1:a", "2:abc"} {
		if id, ok := parseMember(bad); ok {
			t.Errorf("parseMember(%q) = %+v; want an error", bad, id)
		}
	}
}
