package redisstore

import (
	"testing"

	"github.com/idemkit/idem/store"
)

// TestSlot checks the Cluster slot function against the CRC16 check value
// of the Redis Cluster specification and its hash tag rules, and that the
// index of every slot is in that slot.
func TestSlot(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x; want 0x31c3", got)
	}
	for _, c := range []struct{ a, b string }{
		{"{user1000}.following", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // an empty tag: the whole key
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
	} {
		if slot(c.a) != slot(c.b) {
			t.Errorf("slot(%q) = %d, slot(%q) = %d; want equal", c.a, slot(c.a), c.b, slot(c.b))
		}
	}
	x := newIndex("p:", indexPerSlot)
	for i := range clusterSlots {
		if s := slot(x.key(i)); s != i {
			t.Fatalf("index %d has key %q in slot %d", i, x.key(i), s)
		}
	}
	rec := "p:{4:acme:order-42}"
	if slot(x.keyOf(rec)) != slot(rec) {
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
