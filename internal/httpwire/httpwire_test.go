package httpwire

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidToken(t *testing.T) {
	for s, want := range map[string]bool{
		"X-Tenant-Id": true, "POST": true, "a!#$%&'*+-.^_`|~9": true,
		"": false, "a b": false, "a:b": false, "a/b": false, "é": false, "a\x7f": false, "{key}": false,
	} {
		if got := ValidToken(s); got != want {
			t.Errorf("ValidToken(%q) = %v, want %v", s, got, want)
		}
	}
}

// The tenant of Authorization values is the documented hash
// (docs/reconcile.md): SHA-256 of each value behind its length as 8
// big-endian bytes, in hex. An upstream computes it the same way.
func TestCredentialTenant(t *testing.T) {
	manual := func(vs ...string) string {
		var b []byte
		for _, v := range vs {
			n := len(v)
			b = append(b, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
			b = append(b, v...)
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:])
	}
	long := strings.Repeat("x", 1000) // past the stack buffer
	for _, vs := range [][]string{{"Bearer alice"}, {"a", "b"}, {""}, {long, "y"}} {
		if got, want := CredentialTenant(vs), manual(vs...); got != want {
			t.Errorf("CredentialTenant(%q) = %s, want %s", vs, got, want)
		}
	}
	if got := CredentialTenant(nil); got != "" {
		t.Errorf("CredentialTenant(nil) = %q, want none", got)
	}
	// Lengths in front: moving a byte from one value to the next is
	// another tenant.
	if CredentialTenant([]string{"ab", "c"}) == CredentialTenant([]string{"a", "bc"}) {
		t.Error("two different sets of credentials share a tenant")
	}
}

func BenchmarkCredentialTenant(b *testing.B) {
	vs := []string{"Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"}
	b.ReportAllocs()
	for b.Loop() {
		CredentialTenant(vs)
	}
}
