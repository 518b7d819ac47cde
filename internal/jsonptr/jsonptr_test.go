package jsonptr

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Pointer
	}{
		{"", Pointer{}},
		{"/", Pointer{""}},
		{"/request_id", Pointer{"request_id"}},
		{"/a~1b/m~0n/0", Pointer{"a/b", "m~n", "0"}},
		{"/~01", Pointer{"~1"}}, // ~0 first: "~01" is "~1", not "/"
	} {
		got, err := Parse(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if got.String() != c.in {
			t.Errorf("Parse(%q).String() = %q", c.in, got.String())
		}
	}
	for _, bad := range []string{"request_id", "/a~", "/a~2", "#/a"} {
		if p, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %q; want an error", bad, p)
		}
	}
}

func TestLookup(t *testing.T) {
	doc := []byte(` { "a" : {"b": [10, {"c":"x\"y"} ,30]}, "k\u0065y": 1.50, "e": {}, "a/b": null, "m~n": [] } `)
	for _, c := range []struct {
		ptr, want string
		found     bool
	}{
		{"", string(trim(doc)), true},
		{"/a/b/0", "10", true},
		{"/a/b/1/c", `"x\"y"`, true},
		{"/a/b/2", "30", true},
		{"/key", "1.50", true}, // the name decoded, the value as written
		{"/a~1b", "null", true},
		{"/m~0n", "[]", true},
		{"/e", "{}", true},
		{"/a/b/3", "", false},
		{"/a/b/-", "", false},
		{"/a/b/01", "", false},
		{"/a/b/+1", "", false},
		{"/a/b/0/x", "", false},
		{"/missing/x", "", false},
	} {
		got, found, err := Lookup(doc, mustParse(t, c.ptr))
		if err != nil || found != c.found || string(got) != c.want {
			t.Errorf("Lookup(%q) = %q, %v, %v; want %q, %v", c.ptr, got, found, err, c.want, c.found)
		}
	}
}

// A member named twice on the path is ambiguous, however the two names
// are spelled; one named twice elsewhere is not in the way.
func TestDuplicateOnThePath(t *testing.T) {
	for _, doc := range []string{`{"id":"a","id":"b"}`, `{"id":"a","\u0069d":"b"}`, `{"x":{"id":1,"id":2}}`} {
		p := mustParse(t, "/id")
		if doc[2] == 'x' {
			p = mustParse(t, "/x/id")
		}
		if _, _, err := Lookup([]byte(doc), p); !errors.Is(err, ErrDuplicate) {
			t.Errorf("Lookup(%s, %v) = %v; want ErrDuplicate", doc, p, err)
		}
		if _, err := Remove([]byte(doc), p); !errors.Is(err, ErrDuplicate) {
			t.Errorf("Remove(%s, %v) = %v; want ErrDuplicate", doc, p, err)
		}
	}
	got, found, err := Lookup([]byte(`{"other":1,"other":2,"id":"k"}`), mustParse(t, "/id"))
	if err != nil || !found || string(got) != `"k"` {
		t.Errorf("Lookup beside a duplicate = %q, %v, %v", got, found, err)
	}
}

// A member on the path named in another case is ambiguous: Go's
// encoding/json, System.Text.Json (web defaults) and Json.NET take
// Request_Id, or the last of request_id and REQUEST_ID, for request_id;
// so does Go's folding of "İ" and "ı" to "I", and Unicode's of "ſ" to "s"
// and the Kelvin sign to "k". One elsewhere, or a name that folds to
// something else, is not in the way.
func TestCaseVariantOnThePath(t *testing.T) {
	for _, c := range []struct{ doc, ptr string }{
		{`{"Request_Id":"a"}`, "/request_id"},
		{`{"request_id":"a","REQUEST_ID":"b"}`, "/request_id"},
		{`{"REQUEST_ID":"b","request_id":"a"}`, "/request_id"},
		{`{"Meta":{"request_id":"a"}}`, "/meta/request_id"},
		{`{"meta":{"Request_ID":"a"}}`, "/meta/request_id"},
		{`{"request_\u0130d":"a"}`, "/request_id"},
		{`{"request_\u0131d":"a"}`, "/request_id"},
		{`{"\u017fku":"a"}`, "/sku"},
		{`{"\u212aey":"a"}`, "/key"},
		{`[{"ID":1}]`, "/0/id"},
	} {
		p := mustParse(t, c.ptr)
		if _, _, err := Lookup([]byte(c.doc), p); !errors.Is(err, ErrCase) {
			t.Errorf("Lookup(%s, %v) = %v; want ErrCase", c.doc, p, err)
		}
		if _, err := Remove([]byte(c.doc), p); !errors.Is(err, ErrCase) {
			t.Errorf("Remove(%s, %v) = %v; want ErrCase", c.doc, p, err)
		}
	}
	for _, doc := range []string{`{"x":{"ID":1},"id":"k"}`, `{"id":"k","idx":1,"i_d":2,"Other":3}`} {
		got, found, err := Lookup([]byte(doc), mustParse(t, "/id"))
		if err != nil || !found || string(got) != `"k"` {
			t.Errorf("Lookup(%s) = %q, %v, %v; want \"k\"", doc, got, found, err)
		}
	}
}

func TestRemove(t *testing.T) {
	for _, c := range []struct{ doc, ptr, want string }{
		{`{"request_id":"r1","amount":100}`, "/request_id", `{"amount":100}`},
		{`{"amount":100, "request_id":"r1"}`, "/request_id", `{"amount":100}`},
		{`{"a":1,"ts":2,"b":3}`, "/ts", `{"a":1,"b":3}`},
		{`{"only":1}`, "/only", `{}`},
		{` {"meta": {"sent_at": "2024", "v": 1}, "x": [1,2]} `, "/meta/sent_at", `{"meta": {"v": 1},"x": [1,2]}`},
		{`[1,{"t":2,"u":"\u00e9"},3]`, "/1/t", `[1,{"u":"\u00e9"},3]`},
		{`[1,2,3]`, "/1", `[1,3]`},
		{`{"a":1}`, "/missing", `{"a":1}`},
		{`{"a":1}`, "/a/deeper", `{"a":1}`},
		{`"scalar"`, "/a", `"scalar"`},
	} {
		got, err := Remove([]byte(c.doc), mustParse(t, c.ptr))
		if err != nil || string(got) != c.want {
			t.Errorf("Remove(%s, %q) = %s, %v; want %s", c.doc, c.ptr, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("Remove(%s, %q) = %s: not JSON", c.doc, c.ptr, got)
		}
	}
}

// Lookup agrees with encoding/json on documents without duplicate names,
// and Remove leaves a valid document without the value.
func FuzzLookupRemove(f *testing.F) {
	f.Add([]byte(`{"a":{"b":[1,"x",{"c":null}]},"d":"e"}`), "/a/b/2/c")
	f.Add([]byte(`[{"k":"v"}, 2]`), "/0/k")
	f.Add([]byte(`{"a\/b":{"~":1}}`), "/a~1b/~0")
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		p, err := Parse(ptr)
		if err != nil || len(p) == 0 || !json.Valid(doc) {
			return
		}
		got, found, err := Lookup(doc, p)
		if err != nil {
			return // a duplicate name (encoding/json takes the last one), or one in another case
		}
		var whole any
		if json.Unmarshal(doc, &whole) != nil {
			return
		}
		want, ok := walk(whole, p)
		if found != ok {
			t.Fatalf("Lookup(%s, %q) found %v; encoding/json %v", doc, ptr, found, ok)
		}
		if found {
			var v any
			if err := json.Unmarshal(got, &v); err != nil || !reflect.DeepEqual(v, want) {
				t.Fatalf("Lookup(%s, %q) = %s (%v); encoding/json %v", doc, ptr, got, err, want)
			}
		}
		out, err := Remove(doc, p)
		if err != nil || !json.Valid(out) {
			t.Fatalf("Remove(%s, %q) = %s, %v; want a valid document", doc, ptr, out, err)
		}
		if _, still, _ := Lookup(out, p); still && found && len(p) > 0 && isObjectPath(whole, p) {
			t.Fatalf("Remove(%s, %q) = %s still holds the member", doc, ptr, out)
		}
	})
}

func walk(v any, p Pointer) (any, bool) {
	for _, tok := range p {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[tok]; !ok {
				return nil, false
			}
		case []any:
			i := -1
			for j := range c {
				if itoa(j) == tok {
					i = j
				}
			}
			if i < 0 {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// isObjectPath reports whether p ends in an object's member (removing an
// array element shifts the next one into its place).
func isObjectPath(v any, p Pointer) bool {
	parent, _ := walk(v, p[:len(p)-1])
	_, ok := parent.(map[string]any)
	return ok
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func mustParse(t *testing.T, s string) Pointer {
	t.Helper()
	p, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Members walks the top-level members of an object as written, and
// AppendString decodes a name or value as encoding/json does; neither
// allocates beyond the buffer it is given (the gateway reads a JSON
// body's _method with them).
func TestMembersAndAppendString(t *testing.T) {
	doc := []byte(` { "a" : 1, "\u005fmethod":"P\u0041TCH", "o":{"_method":"x"}, "s":"\ud83d\ude00 \ud800 \u00e9\/\"\\\b\f\n\r\t", "e" : [1,{"b":2}] , "z":null } `)
	var names, values []string
	buf := make([]byte, 0, 64)
	for name, value := range Members(doc) {
		var want string
		if err := json.Unmarshal(name, &want); err != nil {
			t.Fatal(err)
		}
		if got := string(AppendString(buf[:0], name)); got != want {
			t.Errorf("AppendString(%s) = %q; encoding/json reads %q", name, got, want)
		}
		if value[0] == '"' {
			if err := json.Unmarshal(value, &want); err != nil {
				t.Fatal(err)
			}
			if got := string(AppendString(buf[:0], value)); got != want {
				t.Errorf("AppendString(%s) = %q; encoding/json reads %q", value, got, want)
			}
		}
		names, values = append(names, string(name)), append(values, string(value))
	}
	wantNames := []string{`"a"`, `"\u005fmethod"`, `"o"`, `"s"`, `"e"`, `"z"`}
	wantValues := []string{`1`, `"P\u0041TCH"`, `{"_method":"x"}`, `"\ud83d\ude00 \ud800 \u00e9\/\"\\\b\f\n\r\t"`, `[1,{"b":2}]`, `null`}
	if !slices.Equal(names, wantNames) || !slices.Equal(values, wantValues) {
		t.Errorf("Members = %q %q; want %q %q", names, values, wantNames, wantValues)
	}
	for _, d := range []string{`[{"a":1}]`, `"a"`, `1`, `{}`, ` { } `} {
		for name := range Members([]byte(d)) {
			t.Errorf("Members(%s) yields %s; want nothing", d, name)
		}
	}
	if n := testing.AllocsPerRun(10, func() {
		for name, value := range Members(doc) {
			if buf = AppendString(buf[:0], name); value[0] == '"' {
				buf = AppendString(buf[:0], value)
			}
		}
	}); n != 0 {
		t.Errorf("Members and AppendString allocate %v times; want 0", n)
	}
}
