package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// What a call of idem keys or idem probe does is said on its command
// line: a variable left in the shell (IDEM_FORCE=true) would make every
// delete release keys in flight or UNKNOWN, and IDEM_I_OWN_THIS_TARGET
// would give the probe's consent to every remote target. Such a variable
// is refused, naming it, before any call.
func TestOneCallsFlagsAreNotTakenFromTheEnvironment(t *testing.T) {
	var calls atomic.Int64
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer admin.Close()
	for _, tc := range []struct {
		variable, value string
		run             func() error
	}{
		{"IDEM_FORCE", "true", func() error {
			return runKeys(context.Background(), []string{"--admin", admin.URL, "delete", "t", "k"}, io.Discard, io.Discard)
		}},
		{"IDEM_NOT_EXECUTED", "true", func() error {
			return runKeys(context.Background(), []string{"--admin", admin.URL, "resolve", "--fence", "7", "t", "k"}, io.Discard, io.Discard)
		}},
		{"IDEM_REASON", "cleanup", func() error {
			return runKeys(context.Background(), []string{"--admin", admin.URL, "delete", "t", "k"}, io.Discard, io.Discard)
		}},
		{"IDEM_I_OWN_THIS_TARGET", "true", func() error {
			return runProbe(context.Background(), []string{"--timeout", "1s", admin.URL}, io.Discard, io.Discard)
		}},
	} {
		t.Run(tc.variable, func(t *testing.T) {
			t.Setenv(tc.variable, tc.value)
			err := tc.run()
			want := tc.variable + " is set, and --" + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(tc.variable, "IDEM_"), "_", "-")) +
				" is taken only from the command line"
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v; want a usage error saying %q", err, want)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("%d calls reached the target; want none", n)
			}
		})
	}
}
