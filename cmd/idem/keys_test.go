package main

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/gateway"
)

// A newcomer asks for a key by the credentials it was sent with ("Bearer
// sk_test_alice"); the admin API knows the tenant as their SHA-256 and
// answers 404. idem keys says so, instead of a bare "no record" that reads
// as "the key is gone".
func TestKeysNotFoundByCredentialsNamesTheTenant(t *testing.T) {
	notFound := &problemError{status: 404, code: gateway.CodeKeyNotFound, detail: "no record for this tenant and key"}
	err := explainKeyError(notFound, "Bearer sk_test_alice", "order-42")
	if err == nil || !strings.Contains(err.Error(), "Idempotency-Tenant") {
		t.Errorf("404 for the tenant %q: %v; want it to say the tenant is the hash the upstream gets as Idempotency-Tenant", "Bearer sk_test_alice", err)
	}
	hashed := strings.Repeat("ab", 32)
	if err := explainKeyError(notFound, hashed, "order-42"); err == nil || strings.Contains(err.Error(), "Idempotency-Tenant") {
		t.Errorf("404 for a hashed tenant: %v; want the plain not-found error", err)
	}
}
