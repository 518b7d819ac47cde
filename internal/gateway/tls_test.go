package gateway

import (
	"path/filepath"
	"strings"
	"testing"
)

// Issue 36, item 1: a certificate without its key (or the reverse), a
// client CA without the admin API's TLS, and a file that does not load
// are errors at start that name the flag; with a client CA, the admin
// API may listen beyond loopback without a token: the certificate
// authenticates.
func TestTLSSettingsAreChecked(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.pem")
	for _, c := range []struct {
		flag, cert, key, ca, want string
	}{
		{"--tls", "cert.pem", "", "", "--tls-cert and --tls-key go together"},
		{"--admin-tls", "", "key.pem", "", "--admin-tls-cert and --admin-tls-key go together"},
		{"--admin-tls", "", "", "ca.pem", "--admin-client-ca needs --admin-tls-cert and --admin-tls-key"},
		{"--tls", missing, missing, "", "--tls-cert " + missing},
	} {
		if _, err := newTLSFiles(c.flag, c.cert, c.key, c.ca); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("newTLSFiles(%q, %q, %q, %q) = %v; want %q", c.flag, c.cert, c.key, c.ca, err, c.want)
		}
	}
	if f, err := newTLSFiles("--tls", "", "", ""); f != nil || err != nil {
		t.Errorf("no TLS files: %v, %v; want none, no error", f, err)
	}
	if err := checkAdmin(Config{Admin: "0.0.0.0:9090"}); err == nil || !strings.Contains(err.Error(), "--admin-client-ca") {
		t.Errorf("a network admin API without a token: %v; want refused, naming client certificates as a way", err)
	}
	if err := checkAdmin(Config{Admin: "0.0.0.0:9090", AdminClientCA: "ca.pem"}); err != nil {
		t.Errorf("a network admin API that requires client certificates: %v; want allowed", err)
	}
}
