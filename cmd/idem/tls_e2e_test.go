package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCA is a certificate authority a test makes: it issues the
// certificates of the gateway's listeners and of its clients.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool(), pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.pool.AddCert(cert)
	return ca
}

// issue returns a certificate the CA signed, with serial, for a server
// on loopback (client false) or for a client named cn, and its key, as
// PEM.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"}}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses, tmpl.DNSNames = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// httpsClient trusts roots and presents cert (none when nil), over
// connections it keeps alive until t ends.
func httpsClient(t *testing.T, roots *x509.CertPool, cert *tls.Certificate, maxVersion uint16) *http.Client {
	conf := &tls.Config{RootCAs: roots, MaxVersion: maxVersion}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, MaxConnsPerHost: 1}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// servedSerial sends req with client and returns the serial of the
// certificate the server presented and whether the connection was one
// kept alive from before.
func servedSerial(t *testing.T, client *http.Client, req *http.Request) (serial int64, reused bool, status int) {
	t.Helper()
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	}))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), reused, resp.StatusCode
}

// Issue 36, item 1: the proxy and the admin API speak TLS (1.2 at least)
// from PEM files; SIGHUP reads them again: the next connections get the
// new certificate, the open ones keep theirs and are not dropped, and a
// pair that does not match keeps the running one, logs why and counts a
// failed reload. With --admin-client-ca the admin API requires a client
// certificate that CA signed: without one it refuses the connection; with
// one, and no token, the caller is read-write and audited by its
// certificate's subject; so authenticated, it may listen beyond loopback;
// idem keys reaches it with --admin-ca, --admin-cert and --admin-key.
func TestTLSListenersReloadAndClientCertificates(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "idem test server CA"), newTestCA(t, "idem test client CA")
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "clients.pem")
	cert1, key1 := serverCA.issue(t, 1001, "idem", false)
	writeFile(t, certFile, cert1)
	writeFile(t, keyFile, key1)
	writeFile(t, caFile, clientCA.pem)
	up := newUpstream(t, 0)
	g := launchServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0", "--log-format", "json", "--upstream", up.URL,
		"--tenant-header", "X-Tenant", "--tls-cert", certFile, "--tls-key", keyFile,
		"--admin-tls-cert", certFile, "--admin-tls-key", keyFile, "--admin-client-ca", caFile)
	g.waitServing(t)
	_, adminPort, _ := net.SplitHostPort(g.admin)
	proxy, admin := "https://"+g.addr, "https://127.0.0.1:"+adminPort

	clients := httpsClient(t, serverCA.pool, nil, 0)
	charge := func(client *http.Client, key string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, proxy+"/charges", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Tenant", "acme")
		return req
	}
	if serial, _, status := servedSerial(t, clients, charge(clients, "k-1")); serial != 1001 || status != http.StatusCreated {
		t.Fatalf("a charge over TLS: %d with certificate %d; want 201 with 1001", status, serial)
	}
	if _, err := httpsClient(t, serverCA.pool, nil, tls.VersionTLS11).Do(charge(nil, "k-old")); err == nil {
		t.Fatal("a TLS 1.1 client was served; want TLS 1.2 at least")
	}
	if resp, err := http.Post("http://"+g.addr+"/charges", "application/json", strings.NewReader("{}")); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the TLS listener: %d; want 400 (no proxying without TLS)", resp.StatusCode)
		}
	}

	// A new pair, and SIGHUP: new connections get it; the kept-alive one
	// stays up, with the old.
	cert2, key2 := serverCA.issue(t, 1002, "idem", false)
	writeFile(t, certFile, cert2)
	writeFile(t, keyFile, key2)
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.waitForLog(t, "configuration reloaded", 1)
	if serial, _, _ := servedSerial(t, httpsClient(t, serverCA.pool, nil, 0), charge(nil, "k-2")); serial != 1002 {
		t.Fatalf("a new connection after the reload got certificate %d; want the new one, 1002", serial)
	}
	if serial, reused, status := servedSerial(t, clients, charge(clients, "k-1")); serial != 1001 || !reused || status != http.StatusCreated {
		t.Fatalf("the connection open before the reload: certificate %d, reused %v, %d; want 1001 on the same connection, the replay", serial, reused, status)
	}

	// A certificate with another's key: the reload fails, the running pair stays.
	cert3, _ := serverCA.issue(t, 1003, "idem", false)
	writeFile(t, certFile, cert3)
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.waitForLog(t, "reload failed", 1)
	if !strings.Contains(g.logText(), "private key does not match public key") {
		t.Errorf("the failed reload does not say why:\n%s", g.logText())
	}
	if serial, _, _ := servedSerial(t, httpsClient(t, serverCA.pool, nil, 0), charge(nil, "k-3")); serial != 1002 {
		t.Fatalf("after a bad pair, a new connection got certificate %d; want the running one, 1002", serial)
	}

	// The admin API: no client certificate, no connection; one the
	// client CA signed, and the caller is its subject.
	if resp, err := httpsClient(t, serverCA.pool, nil, 0).Get(admin + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("the admin API answered %d to a client without a certificate; want the handshake refused", resp.StatusCode)
	}
	wrongCert, wrongKey := serverCA.issue(t, 2001, "mallory", true) // signed, but by another CA
	wrong, _ := tls.X509KeyPair(wrongCert, wrongKey)
	if resp, err := httpsClient(t, serverCA.pool, &wrong, 0).Get(admin + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("the admin API answered %d to a certificate another CA signed; want the handshake refused", resp.StatusCode)
	}
	aliceCert, aliceKey := clientCA.issue(t, 3001, "oncall-alice", true)
	alice, _ := tls.X509KeyPair(aliceCert, aliceKey)
	operator := httpsClient(t, serverCA.pool, &alice, 0)
	del, _ := http.NewRequest(http.MethodDelete, admin+"/v1/keys/acme/k-2", strings.NewReader(`{"reason":"INC-9"}`))
	del.Header.Set("Content-Type", "application/json")
	if _, _, status := servedSerial(t, operator, del); status != http.StatusNoContent {
		t.Fatalf("DELETE by a client certificate: %d; want 204", status)
	}
	// idem keys reaches it with the CA and a client certificate.
	caFileOut, aliceCertFile, aliceKeyFile := filepath.Join(dir, "server-ca.pem"), filepath.Join(dir, "alice.crt"), filepath.Join(dir, "alice.key")
	writeFile(t, caFileOut, serverCA.pem)
	writeFile(t, aliceCertFile, aliceCert)
	writeFile(t, aliceKeyFile, aliceKey)
	out, code := runIdem(t, "keys", "get", "--admin", admin, "--admin-ca", caFileOut, "--admin-cert", aliceCertFile, "--admin-key", aliceKeyFile, "acme", "k-1")
	if code != 0 || !strings.Contains(out, `"state": "COMPLETED"`) {
		t.Errorf("idem keys get with a client certificate: exit %d, %s; want the record", code, out)
	}
	if out, code := runIdem(t, "keys", "get", "--admin", admin, "--admin-ca", caFileOut, "acme", "k-1"); code == 0 {
		t.Errorf("idem keys get without a client certificate: exit 0, %s; want refused", out)
	}
	resp, err := operator.Get(admin + "/v1/audit?tenant=acme&key=k-2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var audit struct {
		Records []struct{ Actor, Action, Outcome string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&audit); err != nil || len(audit.Records) != 1 || audit.Records[0].Actor != "cert:CN=oncall-alice" {
		t.Fatalf("the audit of the delete = %+v, %v; want one record by cert:CN=oncall-alice", audit, err)
	}
	resp, err = operator.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The refused handshakes are lines of idem's log, in its format (JSON).
	refused := 0
	for _, ev := range logEvents(t, g) {
		if msg, _ := ev["msg"].(string); strings.Contains(msg, "TLS handshake error") {
			refused++
		}
	}
	if refused == 0 {
		t.Errorf("no refused handshake in the log:\n%s", g.logText())
	}
	for _, want := range []string{`idem_config_reloads_total{result="failure"} 1`, `idem_config_reloads_total{result="success"} 1`,
		`idem_tls_certificate_expiry_timestamp_seconds{listener="proxy"}`, `idem_tls_certificate_expiry_timestamp_seconds{listener="admin"}`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The deploy fix of issue 36: deploy/systemd/idem.service passes the
// secret files (admin tokens, TLS keys) as systemd credentials, each
// variable pointing at its copy (%d). Run as systemd would run it, with
// those lines uncommented and %d a directory of the copies, the gateway
// serves TLS on both listeners and its admin API takes the tokens file's
// token and the client CA's certificates: every variable names a flag,
// every file is one idem reads.
func TestSystemdCredentialsServe(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/idem.service")
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	serverCA, clientCA := newTestCA(t, "server CA"), newTestCA(t, "client CA")
	cert, key := serverCA.issue(t, 1, "idem", false)
	files := map[string][]byte{"admin-tokens": []byte("oncall read-write oncall-s3cret-token\n"), "tls.crt": cert, "tls.key": key,
		"admin-tls.crt": cert, "admin-tls.key": key, "admin-client-ca.pem": clientCA.pem}
	var env []string
	for _, line := range strings.Split(string(unit), "\n") {
		switch setting, value, _ := strings.Cut(strings.TrimPrefix(line, "#"), "="); {
		case !strings.HasPrefix(line, "#"):
		case setting == "LoadCredential":
			id, _, _ := strings.Cut(value, ":")
			data, ok := files[id]
			if !ok {
				t.Fatalf("the unit loads credential %s, which this test does not know", id)
			}
			writeFile(t, filepath.Join(creds, id), data)
		case setting == "Environment":
			for _, assignment := range strings.Fields(value) {
				env = append(env, strings.ReplaceAll(assignment, "%d", creds))
			}
		}
	}
	if len(env) < 5 {
		t.Fatalf("the unit's credential variables: %v; want the tokens file and the TLS files", env)
	}
	up := newUpstream(t, 0)
	g := launchServe(t, env, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json", "--upstream", up.URL)
	g.waitServing(t)
	req, _ := http.NewRequest(http.MethodPost, "https://"+g.addr+"/charges", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer client")
	if _, _, status := servedSerial(t, httpsClient(t, serverCA.pool, nil, 0), req); status != http.StatusCreated {
		t.Fatalf("a charge over TLS: %d; want 201", status)
	}
	clientCert, clientKey := clientCA.issue(t, 2, "oncall", true)
	pair, _ := tls.X509KeyPair(clientCert, clientKey)
	operator := httpsClient(t, serverCA.pool, &pair, 0)
	for token, want := range map[string]int{"oncall-s3cret-token": http.StatusOK, "": http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+g.admin+"/v1/stats", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if _, _, status := servedSerial(t, operator, req); status != want {
			t.Errorf("GET /v1/stats with a client certificate and token %q: %d; want %d", token, status, want)
		}
	}
}

// Issue 36, item 1: while the store has not answered, the admin API that
// answers /healthz already speaks its TLS and requires its client
// certificates: a probe configured for the running gateway works from
// the first second, and nothing answers in the clear.
func TestStartingAdminSpeaksTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "server CA"), newTestCA(t, "client CA")
	cert, key := serverCA.issue(t, 1, "idem", false)
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "clients.pem")
	writeFile(t, certFile, cert)
	writeFile(t, keyFile, key)
	writeFile(t, caFile, clientCA.pem)
	g := launchServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json", "--upstream", "http://127.0.0.1:1",
		"--store", "redis://127.0.0.1:1/0", "--admin-tls-cert", certFile, "--admin-tls-key", keyFile, "--admin-client-ca", caFile)
	g.waitForLog(t, "admin API up", 1)
	var admin string
	for _, ev := range logEvents(t, g) {
		if ev["msg"] == "idem: admin API up: /healthz answers, /readyz answers 503 until the store answers" {
			admin, _ = ev["admin"].(string)
		}
	}
	clientCert, clientKey := clientCA.issue(t, 2, "probe", true)
	pair, _ := tls.X509KeyPair(clientCert, clientKey)
	probe := httpsClient(t, serverCA.pool, &pair, 0)
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+admin+path, nil)
		if _, _, status := servedSerial(t, probe, req); status != want {
			t.Errorf("%s over TLS while the store does not answer: %d; want %d", path, status, want)
		}
	}
	if resp, err := httpsClient(t, serverCA.pool, nil, 0).Get("https://" + admin + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("/healthz without a client certificate: %d; want the handshake refused", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + admin + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("/healthz answered 200 in the clear")
		}
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM while waiting for the store = %v; want 0\n%s", err, g.logText())
	}
}
