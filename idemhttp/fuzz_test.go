package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// FuzzKeyHeader: any header value gives a valid key or ErrBadKey, never a
// panic; a bare key round-trips, and so does its quoted form; a key can be
// forwarded as a header value unchanged (no space at either end).
func FuzzKeyHeader(f *testing.F) {
	for _, seed := range []string{"k", " 8e03978e-40d5-43e8 ", `"quoted"`, `"a\"b\\c"`, `"bad\e"`, `"open`, `""`, "",
		"a,b", "ключ", "a\x00b", "a\tb", strings.Repeat("k", 255), strings.Repeat("k", 256), `"x" y`, `" x"`, `"x "`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := idemhttp.KeyFromHeader(http.Header{idemhttp.HeaderKey: {v}})
		if err != nil {
			if !errors.Is(err, idemhttp.ErrBadKey) {
				t.Fatalf("%q: error %v is not ErrBadKey", v, err)
			}
			return
		}
		if idem.ValidateKey(key) != nil || strings.Trim(key, " ") != key {
			t.Fatalf("%q gave the invalid key %q", v, key)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := idemhttp.KeyFromHeader(http.Header{idemhttp.HeaderKey: {quoted}}); err != nil || again != key {
			t.Fatalf("%q: key %q quoted as %s gave %q, %v", v, key, quoted, again, err)
		}
		if _, err := idemhttp.KeyFromHeader(http.Header{idemhttp.HeaderKey: {v, v}}); !errors.Is(err, idemhttp.ErrBadKey) {
			t.Fatalf("a repeated header was accepted")
		}
	})
}

// FuzzFingerprint: any body gives a 64-hex-digit fingerprint, never a
// panic, the same one every time; a valid JSON body re-serialised (other
// white space, members in another order) keeps its fingerprint, and a body
// with one byte changed does not.
func FuzzFingerprint(f *testing.F) {
	for _, seed := range []string{`{"a":1,"b":[1,2,{"d":null,"c":"x"}]}`, `{"a":`, `[]`, `{}`, `"\u0041"`, `1.0`, "\xff",
		`{"a":1,"a":2}`, ` { "z" : [ ] , "y":{} } `, "not json", `{"k":"v"} trailing`} {
		f.Add("application/json", seed)
		f.Add("text/plain", seed)
	}
	f.Fuzz(func(t *testing.T, ct, body string) {
		r := httptest.NewRequest("POST", "/pay?x=1", nil)
		r.Header.Set("Content-Type", ct)
		fp := idemhttp.Fingerprint(r, []byte(body))
		if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
			t.Fatalf("fingerprint %q", fp)
		}
		if idem.ValidateFingerprint(fp) != nil || idemhttp.Fingerprint(r, []byte(body)) != fp {
			t.Fatal("fingerprint invalid or not deterministic")
		}
		if len(body) > 0 {
			changed := []byte(body)
			changed[len(changed)/2] ^= 0x01
			if idemhttp.Fingerprint(r, changed) == fp {
				t.Fatalf("a changed byte kept the fingerprint of %q", body)
			}
		}
		// Valid JSON: other white space and, where encoding/json writes the
		// same strings and numbers back, sorted members keep the fingerprint.
		r.Header.Set("Content-Type", "application/json")
		if !json.Valid([]byte(body)) {
			return
		}
		jfp := idemhttp.Fingerprint(r, []byte(body))
		var indented bytes.Buffer
		if err := json.Indent(&indented, []byte(body), " ", "\t"); err != nil {
			t.Fatal(err)
		}
		if idemhttp.Fingerprint(r, indented.Bytes()) != jfp {
			t.Fatalf("re-indenting %q changed the fingerprint", body)
		}
		if strings.Contains(body, `\`) || !utf8.ValidString(body) || hasDuplicateKeys(body) {
			return
		}
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		var sorted bytes.Buffer
		enc := json.NewEncoder(&sorted)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if idemhttp.Fingerprint(r, sorted.Bytes()) != jfp {
			t.Fatalf("sorting the members of %q (%s) changed the fingerprint", body, sorted.Bytes())
		}
	})
}

// hasDuplicateKeys reports whether an object in the valid JSON document s
// has a key twice: decoding it into a map would drop one.
func hasDuplicateKeys(s string) bool {
	dec := json.NewDecoder(strings.NewReader(s))
	type frame struct {
		object    bool
		keys      map[string]bool
		expectKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expectKey {
			if key, ok := tok.(string); ok {
				if top.keys[key] {
					return true
				}
				top.keys[key] = true
				top.expectKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if top != nil && top.object {
				top.expectKey = true
			}
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, expectKey: true})
			continue
		case json.Delim('['):
			if top != nil && top.object {
				top.expectKey = true
			}
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.object {
			top.expectKey = true
		}
	}
}

// TestFingerprintKeyOrder: members in another order and other white space
// keep the fingerprint, at every depth.
func TestFingerprintKeyOrder(t *testing.T) {
	r := httptest.NewRequest("POST", "/pay", nil)
	r.Header.Set("Content-Type", "application/merge-patch+json")
	a := idemhttp.Fingerprint(r, []byte(`{"a":1,"b":{"d":[1,{"f":2,"e":3}],"c":"s p"}}`))
	b := idemhttp.Fingerprint(r, []byte("{\n \"b\": {\"c\": \"s p\", \"d\": [ 1, {\"e\":3, \"f\":2} ]},\r\n \"a\": 1\n}"))
	if a != b {
		t.Error("equivalent JSON documents have different fingerprints")
	}
	for _, other := range []string{`{"a":1,"b":{"d":[{"f":2,"e":3},1],"c":"s p"}}`, `{"a":1,"b":{"d":[1,{"f":2,"e":3}],"c":"sp"}}`,
		`{"a":1.0,"b":{"d":[1,{"f":2,"e":3}],"c":"s p"}}`} {
		if idemhttp.Fingerprint(r, []byte(other)) == a {
			t.Errorf("%s has the fingerprint of a different document", other)
		}
	}
	r.Header.Set("Content-Type", "text/plain")
	if idemhttp.Fingerprint(r, []byte(`{"b":1,"a":2}`)) == idemhttp.Fingerprint(r, []byte(`{"a":2,"b":1}`)) {
		t.Error("a text/plain body was canonicalised as JSON")
	}
}

// FuzzFormFingerprint holds form bodies to the rules JSON bodies follow:
// the pairs of any body that decodes, written again with the groups of
// distinct names in reverse order and every byte percent-encoded, keep
// the fingerprint (like members of an object in another order and other
// escapes); swapping two different values of one name, or changing a
// value, does not (like the elements of an array, or a string). No body
// panics.
func FuzzFormFingerprint(f *testing.F) {
	for _, seed := range []string{"amount=100&currency=usd", "a[]=1&a[]=2&b=x+y", "items[][x]=1&items[][y]=2", "a&a=&&=b",
		"%zz=1", "a=%41%2f%2F", "card[number]=4242&card[exp]=12"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/pay", nil)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		fp := idemhttp.Fingerprint(r, []byte(body))
		if idem.ValidateFingerprint(fp) != nil || idemhttp.Fingerprint(r, []byte(body)) != fp {
			t.Fatal("fingerprint invalid or not deterministic")
		}
		type pair struct {
			name, value string
			eq          bool
		}
		var groups [][]pair // in order of first appearance; pairs of a group in body order
		index := map[string]int{}
		for _, p := range strings.Split(body, "&") {
			if p == "" {
				continue
			}
			rn, rv, eq := strings.Cut(p, "=")
			n, err1 := url.QueryUnescape(rn)
			v, err2 := url.QueryUnescape(rv)
			if err1 != nil || err2 != nil {
				return // hashed as bytes
			}
			g := n
			if i := strings.Index(n, "[]"); i >= 0 {
				g = n[:i+2]
			}
			if _, ok := index[g]; !ok {
				index[g] = len(groups)
				groups = append(groups, nil)
			}
			groups[index[g]] = append(groups[index[g]], pair{n, v, eq})
		}
		encode := func(groups [][]pair) string {
			var b strings.Builder
			for i := len(groups) - 1; i >= 0; i-- {
				for _, p := range groups[i] {
					b.WriteString("&")
					for _, c := range []byte(p.name) {
						fmt.Fprintf(&b, "%%%02X", c)
					}
					if p.eq {
						b.WriteString("=" + url.QueryEscape(p.value))
					}
				}
			}
			return b.String()
		}
		if again := encode(groups); idemhttp.Fingerprint(r, []byte(again)) != fp {
			t.Fatalf("%q written as %q changed the fingerprint", body, again)
		}
		for gi, g := range groups {
			for i := 1; i < len(g); i++ {
				if g[0].name == g[i].name && (g[0].value != g[i].value || g[0].eq != g[i].eq) {
					swapped := slices.Clone(groups)
					swapped[gi] = slices.Clone(g)
					swapped[gi][0], swapped[gi][i] = g[i], g[0]
					if idemhttp.Fingerprint(r, []byte(encode(swapped))) == fp {
						t.Fatalf("%q: swapping the values of %q kept the fingerprint", body, g[0].name)
					}
				}
			}
			changed := slices.Clone(groups)
			changed[gi] = slices.Clone(g)
			changed[gi][0].value += "x"
			changed[gi][0].eq = true
			if idemhttp.Fingerprint(r, []byte(encode(changed))) == fp {
				t.Fatalf("%q: changing the value of %q kept the fingerprint", body, g[0].name)
			}
		}
	})
}
