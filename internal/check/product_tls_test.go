package check

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The rediss:// form of the product's store: a Redis of the harness's
// that also listens with TLS, on a certificate of a CA the harness makes
// for the test. The gateways trust that CA as a deployment trusts a
// private one, by SSL_CERT_FILE (idem's TLS clients use the system's
// roots, which Go reads from that file where it is set).

// productTLS is the certificate files of the TLS Redis.
type productTLS struct{ ca, cert, key string }

// newProductTLS writes a CA and a certificate it signs for 127.0.0.1
// into dir.
func newProductTLS(t *testing.T, dir string) productTLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idem check CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := productTLS{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "redis.pem"), key: filepath.Join(dir, "redis-key.pem")}
	for path, block := range map[string]*pem.Block{f.ca: {Type: "CERTIFICATE", Bytes: caDER}, f.cert: {Type: "CERTIFICATE", Bytes: der},
		f.key: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// args are the redis-server arguments of a TLS port at addr's port with
// these files; clients need no certificate of their own.
func (f productTLS) args(port string) []string {
	return []string{"--tls-port", port, "--tls-cert-file", f.cert, "--tls-key-file", f.key, "--tls-ca-cert-file", f.ca,
		"--tls-auth-clients", "no"}
}
