package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// tlsFiles is one listener's TLS: its certificate and key files and, for
// the admin API, the CA whose client certificates it requires. They are
// read at start and again by every Reload, which swaps the new pair in
// for the handshakes that follow; the connections open keep theirs, and a
// pair that does not load keeps the running one (the reload fails).
type tlsFiles struct {
	flag          string // "--tls" or "--admin-tls": the flags' prefix, for errors
	cert, key, ca string
	current       atomic.Pointer[tlsMaterial]
}

// tlsMaterial is what the files held when last read.
type tlsMaterial struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool // nil without a CA
}

// newTLSFiles checks that the certificate and the key come together and
// reads them; nil when neither is set.
func newTLSFiles(flag, cert, key, ca string) (*tlsFiles, error) {
	switch {
	case cert == "" && key == "" && ca != "":
		return nil, fmt.Errorf("gateway: --admin-client-ca needs %s-cert and %s-key: client certificates are asked for in a TLS handshake", flag, flag)
	case cert == "" && key == "":
		return nil, nil
	case cert == "" || key == "":
		return nil, fmt.Errorf("gateway: %s-cert and %s-key go together: give both, or neither", flag, flag)
	}
	f := &tlsFiles{flag: flag, cert: cert, key: key, ca: ca}
	m, err := f.read()
	if err != nil {
		return nil, err
	}
	f.current.Store(m)
	return f, nil
}

// read reads the files, without swapping them in.
func (f *tlsFiles) read() (*tlsMaterial, error) {
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("gateway: %s-cert %s and %s-key %s: %w", f.flag, f.cert, f.flag, f.key, err)
	}
	m := &tlsMaterial{cert: &pair}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("gateway: --admin-client-ca: %w", err)
		}
		m.clientCAs = x509.NewCertPool()
		if !m.clientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("gateway: --admin-client-ca %s holds no PEM certificate", f.ca)
		}
	}
	return m, nil
}

// config is the listener's TLS configuration: TLS 1.2 at least, HTTP/1.1
// only (the connection limits, timeouts and lingering close of
// limits.go are per connection: HTTP/2 would multiplex past them), the
// running certificate for each handshake, and with a CA a client
// certificate it signed required.
func (f *tlsFiles) config() *tls.Config {
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return f.current.Load().cert, nil
		},
	}
	if f.ca == "" {
		return base
	}
	base.ClientAuth = tls.RequireAndVerifyClientCert
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientCAs = f.current.Load().clientCAs // the bundle of the last (re)load
		return c, nil
	}}
}

// listen wraps ln in f's TLS; ln itself when f is nil.
func (f *tlsFiles) listen(ln net.Listener) net.Listener {
	if f == nil {
		return ln
	}
	return tls.NewListener(ln, f.config())
}

// AdminTLS is the admin API's TLS configuration from c's files, read now,
// for a listener served before the gateway is built (idem serve's while
// the store has not answered); nil without --admin-tls-cert. The gateway
// reads the files again when New builds it.
func (c Config) AdminTLS() (*tls.Config, error) {
	f, err := newTLSFiles("--admin-tls", c.AdminTLSCert, c.AdminTLSKey, c.AdminClientCA)
	if f == nil || err != nil {
		return nil, err
	}
	return f.config(), nil
}

// registerCertExpiry registers idem_tls_certificate_expiry_timestamp_seconds
// for the listeners with TLS: when the certificate served now stops being
// valid, so that an alert can fire before a rotation that never came.
func registerCertExpiry(reg prometheus.Registerer, listeners map[string]*tlsFiles) {
	for name, f := range listeners {
		if f == nil {
			continue
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "idem_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate a listener serves (listener proxy or admin) expires, in Unix seconds; a reload that reads a new one moves it.",
			ConstLabels: prometheus.Labels{"listener": name},
		}, func() float64 {
			leaf := f.current.Load().cert.Leaf
			if leaf == nil {
				return 0
			}
			return float64(leaf.NotAfter.Unix())
		}))
	}
}
