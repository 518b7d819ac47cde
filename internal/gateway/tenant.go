package gateway

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpwire"
)

// TenantSourcesHelp describes the --tenant-from forms.
const TenantSourcesHelp = "comma-separated sources of the tenant, combined into one: authorization (the Authorization header), " +
	"header:NAME (a header set by a proxy you trust), cookie:NAME (a session cookie)"

// tenantSource is one place a request's tenant comes from.
type tenantSource struct {
	spec string // as configured, canonical: "authorization", "header:X-Tenant", "cookie:session"
	kind string // "authorization", "header" or "cookie"
	name string // the header (canonical) or cookie name
}

// parseTenantSources parses a --tenant-from list.
func parseTenantSources(specs []string) ([]tenantSource, error) {
	var out []tenantSource
	seen := map[string]bool{}
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		kind, name, _ := strings.Cut(spec, ":")
		s := tenantSource{kind: strings.ToLower(kind), name: name}
		switch {
		case s.kind == "authorization" && name == "":
			s.spec = s.kind
		case s.kind == "header" && httpwire.ValidToken(name):
			s.name = http.CanonicalHeaderKey(name)
			s.spec = s.kind + ":" + s.name
		case s.kind == "cookie" && httpwire.ValidToken(name):
			s.spec = s.kind + ":" + s.name
		default:
			return nil, fmt.Errorf("gateway: --tenant-from: bad source %q; want %s", spec, TenantSourcesHelp)
		}
		if seen[s.spec] {
			return nil, fmt.Errorf("gateway: --tenant-from: %s listed twice", s.spec)
		}
		seen[s.spec] = true
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gateway: --tenant-from is empty; want %s", TenantSourcesHelp)
	}
	return out, nil
}

// values returns what the request carries for s: nil when it carries
// nothing, an error when it is ambiguous (a trusted header or a cookie
// sent more than once).
func (s tenantSource) values(r *http.Request) ([]string, error) {
	var vs []string
	switch s.kind {
	case "authorization":
		vs = r.Header["Authorization"]
	case "header":
		vs = r.Header[s.name]
	case "cookie":
		for _, c := range r.CookiesNamed(s.name) {
			vs = append(vs, c.Value)
		}
	}
	// An empty value is no credential: it must not become one scope
	// shared by every client that sends it.
	if !slices.ContainsFunc(vs, func(v string) bool { return v != "" }) {
		return nil, nil
	}
	if s.kind == "authorization" {
		return vs, nil
	}
	if len(vs) > 1 {
		return nil, fmt.Errorf("%s must be sent once, it was sent %d times", s.spec, len(vs))
	}
	return vs, nil
}

// tenantFunc returns the middleware's Tenant: the sources a request
// carries, combined into one tenant. A request with none of them gets
// idemhttp.ErrTenantMissing (400 tenant_missing), or the one scope shared by
// every anonymous client when allowAnonymous is set.
//
// One source keeps the tenant each had before --tenant-from, so that keys
// stored by an older gateway still replay: the hex SHA-256 of the
// Authorization values (idemhttp's default), the trusted header's value
// itself (--tenant-header). A cookie is a secret, so it is hashed like
// Authorization. Several sources are hashed together, each under its name
// and with lengths in front, so no two different sets of credentials meet.
func tenantFunc(sources []tenantSource, allowAnonymous bool) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		var b []byte
		found, plain := 0, ""
		for _, s := range sources {
			vs, err := s.values(r)
			if err != nil {
				return "", err
			}
			if len(vs) == 0 {
				continue
			}
			found++
			if len(sources) > 1 {
				b = httpwire.AppendField(b, s.spec)
				b = binary.BigEndian.AppendUint64(b, uint64(len(vs)))
			}
			for _, v := range vs {
				b = httpwire.AppendField(b, v)
			}
			if s.kind == "header" {
				plain = vs[0]
			}
		}
		switch {
		case found == 0 && allowAnonymous:
			return "", nil
		case found == 0:
			return "", fmt.Errorf("%w: send one of %s", idemhttp.ErrTenantMissing, specList(sources))
		case len(sources) == 1 && sources[0].kind == "header":
			return plain, nil
		}
		return httpwire.SumTenant(b), nil
	}
}

func specList(sources []tenantSource) string {
	specs := make([]string, len(sources))
	for i, s := range sources {
		specs[i] = s.spec
	}
	return strings.Join(specs, ", ")
}
