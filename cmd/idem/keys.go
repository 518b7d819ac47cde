package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/gateway"
)

const keysUsage = `idem keys [--admin URL] [--admin-token TOKEN] get TENANT KEY
  idem keys [--admin URL] [--admin-token TOKEN] delete [--force] [--reason TEXT] TENANT KEY
  idem keys [--admin URL] [--admin-token TOKEN] list --unknown [--tenant TENANT]
  idem keys [--admin URL] [--admin-token TOKEN] resolve --fence N (--not-executed | --status CODE [--header 'Name: value']... [--body TEXT | --body-file PATH]) [--reason TEXT] TENANT KEY
(TENANT %q is the empty tenant, "--" the tenant "-": n dashes name the tenant of n-1 dashes;
 list and get print it as "tenant_arg"; TENANT and KEY come last, after the flags;
 idem keys calls a running gateway's admin API, which audits each change)`

// keysTimeout bounds each call of idem keys to the admin API.
const keysTimeout = 30 * time.Second

// headerList is a repeatable --header 'Name: value' flag.
type headerList [][2]string

func (h *headerList) String() string { return fmt.Sprint(*h) }

func (h *headerList) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return errors.New("want 'Name: value'")
	}
	*h = append(*h, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	return nil
}

func runKeys(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if givenOnCommandLine(args, "store") {
		return fmt.Errorf("%w: idem keys no longer opens the store: it calls a running gateway's admin API, which audits each change "+
			"(--admin 127.0.0.1:9090, the gateway's --admin; --admin-token or IDEM_ADMIN_TOKEN)", errUsage)
	}
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	adminURL := fs.String("admin", "127.0.0.1:9090", "the admin API of a running idem serve: its --admin address (host:port), or a URL (http://host:port/prefix)")
	token := fs.String("admin-token", "", "a bearer token of the admin API (--admin-token's, or a read-write one of --admin-tokens-file to change keys)")
	var tlsFiles adminClientTLS
	fs.StringVar(&tlsFiles.ca, "admin-ca", "", "with an https:// --admin: a PEM file of the CAs that sign the admin API's certificate (default: the system's)")
	fs.StringVar(&tlsFiles.cert, "admin-cert", "", "with an https:// --admin: a PEM file of a client certificate the gateway's --admin-client-ca signed; with --admin-key")
	fs.StringVar(&tlsFiles.key, "admin-key", "", "the PEM file of --admin-cert's key")
	unknown := fs.Bool("unknown", false, "list: the keys in state UNKNOWN (the only state listed)")
	tenant := fs.String("tenant", "", "list: only this tenant's keys, as TENANT names it (default: all tenants; \"-\" is the empty tenant, \"--\" the tenant \"-\")")
	fence := fs.Int64("fence", 0, "resolve: the UNKNOWN record's fence (see 'idem keys get')")
	notExecuted := fs.Bool("not-executed", false, "resolve: the request did not take effect; release the key so the next request runs it")
	status := fs.Int("status", 0, "resolve: the request took effect; record this status and replay it")
	var headers headerList
	fs.Var(&headers, "header", "resolve: a header of the recorded response, 'Name: value' (repeatable)")
	body := fs.String("body", "", "resolve: the body of the recorded response")
	bodyFile := fs.String("body-file", "", "resolve: read the body of the recorded response from this file")
	force := fs.Bool("force", false, "delete: also a key in flight (PROCESSING) or UNKNOWN, which lets the next request run it again")
	reason := fs.String("reason", "", "delete, resolve: why, recorded in the gateway's audit (at most 1 KiB)")
	// What to do, to which keys and why is said on the command line of
	// each call, never by a variable left in the shell: IDEM_FORCE=true
	// would make every delete release keys in flight or UNKNOWN. Only how
	// to reach the admin API comes from the environment too.
	if err := parseFlags(fs, args, "unknown", "tenant", "fence", "not-executed", "status", "header", "body", "body-file",
		"force", "reason"); err != nil {
		return err
	}
	// Flags may also follow the verb: parse what comes after it again.
	// TENANT and KEY are the last two arguments, set aside before: the
	// flag package would read the tenant "-", which is "--", as the end of
	// the flags, and "---" or a key "-x" as a flag.
	verb, rest := fs.Arg(0), fs.Args()
	want, ok := map[string]int{"get": 2, "delete": 2, "list": 0, "resolve": 2}[verb]
	var ids []string
	if len(rest) > want {
		rest, ids = rest[:len(rest)-want], rest[len(rest)-want:]
	}
	if len(rest) > 0 {
		if err := fs.Parse(rest[1:]); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !ok || len(rest) == 0 || fs.NArg() != 0 || len(ids) != want {
		return fmt.Errorf("%w: "+keysUsage, errUsage, gateway.EmptyTenant)
	}
	if verb == "list" && !*unknown {
		return fmt.Errorf("%w: idem keys list lists the UNKNOWN keys only: add --unknown", errUsage)
	}
	api, err := newAdminClient(*adminURL, *token, tlsFiles)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	if verb == "list" {
		return api.listUnknown(ctx, enc, set["tenant"], *tenant)
	}
	tenantArg, key := ids[0], ids[1]
	switch {
	case tenantArg == "":
		return fmt.Errorf("%w: TENANT is empty: the empty tenant is %q", errUsage, gateway.EmptyTenant)
	case key == "":
		return fmt.Errorf("%w: KEY is empty", errUsage)
	}
	path := "v1/keys/" + segment(tenantArg) + "/" + segment(key)
	switch verb {
	case "delete":
		if *force {
			path += "?force=true"
		}
		var note any // a DELETE's body is optional: {"reason": ...}
		if *reason != "" {
			note = map[string]string{"reason": *reason}
		}
		if err := api.do(ctx, http.MethodDelete, path, note, nil); err != nil {
			return explainKeyError(err, tenantArg, key)
		}
		fmt.Fprintln(stdout, "deleted")
		return nil
	case "resolve":
		res, err := resolutionFromFlags(*fence, *notExecuted, *status, headers, set["body"], *body, *bodyFile)
		if err != nil {
			return err
		}
		res.Reason = *reason
		if err := api.do(ctx, http.MethodPost, path+"/resolve", res, nil); err != nil {
			return explainKeyError(err, tenantArg, key)
		}
		fmt.Fprintln(stdout, "resolved:", res.Outcome)
		return nil
	}
	var rec gateway.RecordView
	if err := api.do(ctx, http.MethodGet, path, nil, &rec); err != nil {
		return explainKeyError(err, tenantArg, key)
	}
	enc.SetIndent("", "  ")
	return enc.Encode(newKeyLine(rec))
}

// keyLine is a record as idem keys get and list print it: with the TENANT
// argument that names its tenant, which for a tenant of dashes is not the
// tenant itself (the tenant "-" is "--", "-" the empty tenant). Without
// it, an operator passing a listed "tenant" back would act on another
// tenant's key.
type keyLine struct {
	TenantArg string `json:"tenant_arg"`
	gateway.RecordView
}

func newKeyLine(rec gateway.RecordView) keyLine {
	return keyLine{TenantArg: gateway.TenantSegment(rec.Tenant), RecordView: rec}
}

// adminClient calls the admin API of a running gateway, as an operator's
// tool must: by its address (the Host it answers), with JSON for every
// change (adminguard.go).
type adminClient struct {
	base   *url.URL
	token  string
	client *http.Client
}

// adminClientTLS are the files idem keys reaches an admin API over TLS
// with: the CAs it trusts, a client certificate and its key.
type adminClientTLS struct{ ca, cert, key string }

func newAdminClient(addr, token string, files adminClientTLS) (*adminClient, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw // the gateway's --admin, host:port
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("%w: --admin %q: want the gateway's --admin address (host:port) or an http(s):// URL without credentials", errUsage, addr)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if files != (adminClientTLS{}) {
		if u.Scheme != "https" {
			return nil, fmt.Errorf("%w: --admin-ca, --admin-cert and --admin-key need an https:// --admin", errUsage)
		}
		conf, err := files.config()
		if err != nil {
			return nil, err
		}
		transport.TLSClientConfig = conf
	}
	return &adminClient{base: u, token: token, client: &http.Client{Timeout: keysTimeout, Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// config reads the files into a client's TLS configuration.
func (f adminClientTLS) config() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("%w: --admin-ca: %w", errUsage, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --admin-ca %s holds no PEM certificate", errUsage, f.ca)
		}
	}
	if (f.cert == "") != (f.key == "") {
		return nil, fmt.Errorf("%w: --admin-cert and --admin-key go together", errUsage)
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("%w: --admin-cert and --admin-key: %w", errUsage, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}

// problemError is an answer of the admin API that is not a success.
type problemError struct {
	status       int
	code, detail string
}

func (p *problemError) Error() string {
	if p.code == "" {
		return fmt.Sprintf("the admin API answered %d: %s", p.status, p.detail)
	}
	return fmt.Sprintf("the admin API answered %d %s: %s", p.status, p.code, p.detail)
}

// do sends one call: in, when not nil, as its JSON body (a change always
// carries Content-Type: application/json); a 2xx answer's JSON goes into
// out, when not nil; any other answer is a *problemError.
func (c *adminClient) do(ctx context.Context, method, path string, in, out any) error {
	ref, err := url.Parse(path)
	if err != nil {
		return err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.ResolveReference(ref).String(), body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("the admin API at %s did not answer (is idem serve running, with this --admin?): %w", c.base.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("the admin API at %s: reading its answer: %w", c.base.Redacted(), err)
	}
	if resp.StatusCode/100 != 2 {
		p := &problemError{status: resp.StatusCode}
		var problem struct{ Code, Detail string }
		if json.Unmarshal(data, &problem) == nil && problem.Code != "" {
			p.code, p.detail = problem.Code, problem.Detail
		} else {
			p.detail = strings.TrimSpace(string(data[:min(len(data), 300)]))
		}
		return p
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("the admin API at %s answered %d with no JSON this idem reads: %w", c.base.Redacted(), resp.StatusCode, err)
		}
	}
	return nil
}

// listUnknown prints every UNKNOWN key, one JSON object a line, page by page.
func (c *adminClient) listUnknown(ctx context.Context, enc *json.Encoder, oneTenant bool, tenant string) error {
	q := url.Values{"state": {"unknown"}}
	if oneTenant {
		q.Set("tenant", tenant)
	}
	for {
		var page gateway.KeyPage
		if err := c.do(ctx, http.MethodGet, "v1/keys?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		for _, rec := range page.Keys {
			if err := enc.Encode(newKeyLine(rec)); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		q.Set("after", page.Next)
	}
}

// segment writes a TENANT or KEY argument as one path segment of the
// admin API: percent-encoded, dots too, so "." and ".." stay segments.
// A TENANT's dashes follow the admin API's rule, which is idem keys' own.
func segment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ".", "%2E")
}

// explainKeyError says what to do about the admin API's refusals that an
// operator of idem keys meets.
func explainKeyError(err error, tenant, key string) error {
	var p *problemError
	if !errors.As(err, &p) {
		return err
	}
	switch p.code {
	case "key_in_flight":
		return fmt.Errorf("%w\nthe key is in flight (PROCESSING): deleting it would let a retry run it a second time; wait until it finishes, or pass --force", err)
	case gateway.CodeKeyUnknown:
		return fmt.Errorf("%w\nthe key is UNKNOWN: deleting it would let a retry run it again; settle it with idem keys resolve, or pass --force", err)
	case gateway.CodeKeyNotFound:
		if strings.ContainsRune(tenant, ' ') {
			// "Bearer sk_..." is what a newcomer tries first; a 404 alone
			// reads as "the key is gone" while it may be stored.
			return fmt.Errorf("no record for tenant %q key %q (%w)\nthe tenant is not the credentials: by default it is the SHA-256 of the Authorization header, which the upstream gets as Idempotency-Tenant", tenant, key, err)
		}
		return fmt.Errorf("no record for tenant %s key %q (%w)", tenant, key, err)
	case gateway.CodeAdminUnauthorized:
		return fmt.Errorf("%w\ngive the gateway's token: --admin-token, or IDEM_ADMIN_TOKEN", err)
	}
	return err
}

// resolutionFromFlags builds and checks the operator's resolution.
func resolutionFromFlags(fence int64, notExecuted bool, status int, headers headerList, hasBody bool, body, bodyFile string) (gateway.Resolution, error) {
	res := gateway.Resolution{Fence: fence, Outcome: "completed", Status: status}
	if notExecuted {
		if status != 0 || len(headers) > 0 || hasBody || bodyFile != "" {
			return res, fmt.Errorf("%w: --not-executed takes no --status, --header, --body or --body-file", errUsage)
		}
		res.Outcome, res.Status = "not_executed", 0
	} else {
		if status == 0 {
			return res, fmt.Errorf("%w: resolve needs --not-executed, or --status for a request that took effect", errUsage)
		}
		for _, kv := range headers {
			if res.Header == nil {
				res.Header = http.Header{}
			}
			res.Header.Add(kv[0], kv[1])
		}
		switch {
		case hasBody && bodyFile != "":
			return res, fmt.Errorf("%w: give --body or --body-file, not both", errUsage)
		case hasBody:
			res.Body = &body
		case bodyFile != "":
			b, err := os.ReadFile(bodyFile)
			if err != nil {
				return res, fmt.Errorf("%w: --body-file: %w", errUsage, err)
			}
			s := string(b)
			res.Body = &s
		}
	}
	if _, err := res.Result(); err != nil {
		return res, fmt.Errorf("%w: %w", errUsage, err)
	}
	return res, nil
}
