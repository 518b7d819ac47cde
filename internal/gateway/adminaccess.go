package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
	"unicode"

	"github.com/idemkit/idem/idemhttp"
)

// CodeAdminForbidden (403, admin API): a change asked with a read-only
// token; nothing changed.
const CodeAdminForbidden = "admin_forbidden"

// The roles of an admin token.
const (
	RoleReadOnly  = "read-only"  // GETs only: keys, lists, stats, stored responses, the audit
	RoleReadWrite = "read-write" // every call: also resolve, reconcile and delete
)

// adminTokenName is the name of --admin-token's token, read-write.
const adminTokenName = "admin-token"

// minAdminToken is the fewest bytes an admin token has, --admin-token's
// and each of --admin-tokens-file's. It refuses a word (a role, a name,
// "s3cret") as a bearer token, and so a tokens-file line written
// "token role name" with a short name: its last field, the name, is then
// the token, and the secret would be the actor of every audit record
// (looksLikeName and looksLikeSecret catch it with a longer name). 16
// bytes is what the shortest usual secret has (openssl rand -base64 12,
// or -hex 8) and fewer than the docs' openssl rand -hex 32.
const minAdminToken = 16

// looksLikeName reports whether a tokens file's token is lowercase
// letters, '-', '_' and '.' only: a name ("grafana-dashboards"), the last
// field of a line written "token role name", not a secret. A random one
// practically always holds a digit or a capital: the shortest that
// minAdminToken lets through has none with odds of 1.5e-7 (openssl rand
// -hex 8) or 6e-7 (-base64 12), and -hex 32 of 5e-28. It refuses a
// passphrase of lowercase words too, a price worth the audit: the swap
// puts the secret in every audit record. --admin-token has no name to
// swap with, so it keeps only minAdminToken.
func looksLikeName(token string) bool {
	return strings.Trim(token, "abcdefghijklmnopqrstuvwxyz-_.") == ""
}

// looksLikeSecret reports whether a tokens file's name is 16 or more hex
// digits, letters and numbers both (openssl rand -hex 8 and longer): a
// secret, the first field of a line written "token role name", whose
// token may have a digit or a capital (grafana-2) that looksLikeName
// misses. A name is no such string (a numeric id has no letter).
func looksLikeSecret(name string) bool {
	return len(name) >= minAdminToken && strings.Trim(name, "0123456789abcdefABCDEF") == "" &&
		strings.ContainsAny(name, "0123456789") && strings.ContainsAny(name, "abcdefABCDEF")
}

// adminActor is who makes an admin call: a token's name and role, or,
// for an admin API without tokens, the name of that (loopback-no-token).
type adminActor struct {
	name   string
	role   string
	bearer []byte // "Bearer <token>"; nil without a token
}

// adminAccess is the admin API's tokens. Without any (no --admin-token and
// no --admin-tokens-file) every caller that reaches it is open, read-write;
// or, with --admin-client-ca, every caller whose client certificate the
// TLS handshake verified, named by its subject.
type adminAccess struct {
	tokens []adminActor
	open   *adminActor // non-nil when no token is required
	certs  bool        // no token: the verified client certificate names the caller
}

// maxCertActor bounds the length of an actor named by its certificate.
const maxCertActor = 200

// loadAdminAccess reads the tokens of cfg: --admin-token and the lines of
// --admin-tokens-file, read now (at start, and again on each reload).
func loadAdminAccess(cfg Config) (*adminAccess, error) {
	a := &adminAccess{}
	if cfg.AdminToken != "" {
		a.tokens = append(a.tokens, adminActor{name: adminTokenName, role: RoleReadWrite, bearer: []byte("Bearer " + cfg.AdminToken)})
	}
	if cfg.AdminTokensFile != "" {
		data, err := os.ReadFile(cfg.AdminTokensFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: --admin-tokens-file: %w", err)
		}
		file, err := parseAdminTokens(data, cfg.AdminToken)
		if err != nil {
			return nil, fmt.Errorf("gateway: --admin-tokens-file %s: %w", cfg.AdminTokensFile, err)
		}
		a.tokens = append(a.tokens, file...)
	}
	switch {
	case cfg.hasAdminTokens():
	case cfg.AdminClientCA != "":
		a.certs = true
	default:
		name := "loopback-no-token"
		if !isLoopback(cfg.Admin) {
			name = "insecure-no-token" // --admin-insecure
		}
		a.open = &adminActor{name: name, role: RoleReadWrite}
	}
	return a, nil
}

// parseAdminTokens reads a tokens file: one "name role token" a line,
// separated by white space; blank lines and lines starting with # are
// skipped. Names and tokens are unique, and neither may be --admin-token's
// (adminToken, when set). A name that looks like a secret, or a token
// that looks like a name, is refused: the line is likely "token role
// name". Errors name the line and the field, never quote one: in a line
// whose fields are out of order ("name token role", "token role name")
// any of them may be the token.
func parseAdminTokens(data []byte, adminToken string) ([]adminActor, error) {
	var out []adminActor
	names, secrets := map[string]int{}, map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 3:
			return nil, fmt.Errorf("line %d: want \"name role token\" (3 fields), got %d", n, len(f))
		case !validTokenName(f[0]):
			return nil, fmt.Errorf("line %d: the name (1st field) is not letters, digits, '.', '_', '-' or '@', at most 64", n)
		case f[1] != RoleReadOnly && f[1] != RoleReadWrite:
			return nil, fmt.Errorf("line %d: the role (2nd field) is not %s or %s", n, RoleReadOnly, RoleReadWrite)
		case len(f[2]) < minAdminToken:
			return nil, fmt.Errorf("line %d: the token (3rd field) is shorter than %d bytes, too short to be a secret "+
				"(make one with openssl rand -hex 32); is the line \"name role token\", in that order?", n, minAdminToken)
		case strings.ContainsFunc(f[2], unicode.IsControl):
			return nil, fmt.Errorf("line %d: the token (3rd field) holds a control character", n)
		case looksLikeSecret(f[0]):
			return nil, fmt.Errorf("line %d: the name (1st field) is %d or more hex digits, a secret, not a name; "+
				"is the line \"name role token\", in that order? (a name that is one: rename it)", n, minAdminToken)
		case looksLikeName(f[2]):
			return nil, fmt.Errorf("line %d: the token (3rd field) is lowercase letters, '-', '_' and '.' only, with no digit: "+
				"a name, not a random secret (make one with openssl rand -hex 32); is the line \"name role token\", in that order?", n)
		case names[f[0]] != 0:
			return nil, fmt.Errorf("line %d: the name (1st field) is line %d's too", n, names[f[0]])
		case secrets[f[2]] != 0:
			return nil, fmt.Errorf("line %d: the token (3rd field) is line %d's too: a token names one caller", n, secrets[f[2]])
		case adminToken != "" && f[0] == adminTokenName:
			return nil, fmt.Errorf("line %d: the name (1st field) is --admin-token's (%s)", n, adminTokenName)
		case adminToken != "" && subtle.ConstantTimeCompare([]byte(f[2]), []byte(adminToken)) == 1:
			return nil, fmt.Errorf("line %d: the token (3rd field) is --admin-token's: a token names one caller", n)
		}
		names[f[0]], secrets[f[2]] = n, n
		out = append(out, adminActor{name: f[0], role: f[1], bearer: []byte("Bearer " + f[2])})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func validTokenName(name string) bool {
	return name != "" && len(name) <= 64 && strings.Trim(name,
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@") == ""
}

// identify returns the caller of r: the token its Authorization header
// carries, compared in constant time with every token.
func (a *adminAccess) identify(r *http.Request) (adminActor, bool) {
	if a.open != nil {
		return *a.open, true
	}
	if a.certs {
		// The handshake required a certificate of --admin-client-ca:
		// every request on the listener has one. A handler served
		// elsewhere (a test's) does not, and is refused.
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			return adminActor{}, false
		}
		name := "cert:" + r.TLS.VerifiedChains[0][0].Subject.String()
		if len(name) > maxCertActor {
			name = strings.ToValidUTF8(name[:maxCertActor], "")
		}
		return adminActor{name: name, role: RoleReadWrite}, true
	}
	got := []byte(r.Header.Get("Authorization"))
	var who adminActor
	found := false
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(got, t.bearer) == 1 {
			who, found = t, true
		}
	}
	return who, found
}

// actorKey is the context key of the adminActor of an admin call.
type actorKey struct{}

// authorize lets a call through with a token (of any role: a change
// checks read-write itself, to audit the refusal), else answers 401.
func (g *Gateway) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		access := g.access.Load()
		who, ok := access.identify(r)
		switch {
		case !ok && access.certs:
			idemhttp.WriteProblem(w, http.StatusUnauthorized, CodeAdminUnauthorized,
				"the admin API needs a client certificate of --admin-client-ca, verified in the TLS handshake")
			return
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
			idemhttp.WriteProblem(w, http.StatusUnauthorized, CodeAdminUnauthorized,
				"the admin API needs a bearer token: --admin-token's, or one of --admin-tokens-file")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, who)))
	})
}

// actorOf returns the caller that authorize let through.
func actorOf(r *http.Request) adminActor {
	who, _ := r.Context().Value(actorKey{}).(adminActor)
	return who
}
