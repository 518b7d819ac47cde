package gateway

import (
	"fmt"
	"strconv"

	"github.com/idemkit/idem/idemhttp"
)

// StatusOverrides change, for one route, what becomes of a key after the
// upstream answered with a status: Store the response and replay it,
// Release the key so a retry runs again, or mark it Unknown. Each entry
// is a status (409) or a class (5xx); a status beats its class, and what
// no entry names follows the format's policy (idemhttp.DefaultStatusPolicy,
// or Stripe's under --error-format stripe). Release only what provably did
// not run: a released key's retry runs again.
type StatusOverrides struct {
	Store   []string `yaml:"store"`   // statuses (409) or classes (5xx) whose response is stored and replayed
	Release []string `yaml:"release"` // statuses or classes that release the key: a retry runs again
	Unknown []string `yaml:"unknown"` // statuses or classes that mark the key UNKNOWN (it may have taken effect)
}

func (s StatusOverrides) isEmpty() bool {
	return s.Store == nil && s.Release == nil && s.Unknown == nil
}

// compile returns the route's status policy: base with the overrides.
func (s StatusOverrides) compile(base func(int) idemhttp.Disposition) (func(int) idemhttp.Disposition, error) {
	if s.isEmpty() {
		return base, nil
	}
	var exact [600]idemhttp.Disposition
	var class [6]idemhttp.Disposition
	where := map[string]string{} // entry → the field that named it first
	for _, list := range []struct {
		field   string
		entries []string
		d       idemhttp.Disposition
	}{{"store", s.Store, idemhttp.DispositionStore}, {"release", s.Release, idemhttp.DispositionRelease}, {"unknown", s.Unknown, idemhttp.DispositionUnknown}} {
		for i, e := range list.entries {
			path := fmt.Sprintf("%s[%d]", list.field, i)
			if first, dup := where[e]; dup {
				return nil, &FieldError{Path: path, Err: fmt.Errorf("%q is already listed in %s", e, first)}
			}
			where[e] = path
			if len(e) == 3 && e[1:] == "xx" && e[0] >= '1' && e[0] <= '5' {
				class[e[0]-'0'] = list.d
				continue
			}
			code, err := strconv.Atoi(e)
			if err != nil || code < 100 || code > 599 || strconv.Itoa(code) != e {
				return nil, &FieldError{Path: path, Err: fmt.Errorf("%q: want a status from 100 to 599 or a class such as 5xx", e)}
			}
			exact[code] = list.d
		}
	}
	return func(status int) idemhttp.Disposition {
		if status < 100 || status > 599 {
			return base(status)
		}
		if d := exact[status]; d != 0 {
			return d
		}
		if d := class[status/100]; d != 0 {
			return d
		}
		return base(status)
	}, nil
}
