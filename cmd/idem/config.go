package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/gateway"
	"go.yaml.in/yaml/v3"
)

// configFile is an `idem serve --config` file (docs/configuration.md): the flags' settings under their names, and the
// routes. It is YAML, read strictly: an unknown field, a value of the
// wrong type, a key set twice or a second document is an error that names
// the file, the line and the field.
type configFile struct {
	path   string
	values map[string]string // flag name → value, as the flag parses it
	routes []gateway.Route
	lines  map[string]int // field path (lease, routes[1].wait) → its line
}

// listFlags are the flags that take a comma-separated list: in the file,
// a YAML list.
var listFlags = []string{"methods", "tenant-from", "replay-headers", "admin-hosts"}

// loadConfigFile reads and decodes the file at path; fs names the flags
// the file may set, but for notKeys (the file's own flag, the modes of
// one run).
func loadConfigFile(path string, fs *flag.FlagSet, notKeys []string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	c := &configFile{path: path, values: map[string]string{}, lines: map[string]int{}}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return c, nil // empty: the flags' defaults
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err) // yaml's errors name the line
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: one YAML document only", path, more.Line)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, c.errAt(root.Line, "", "want a mapping of settings (listen: ..., routes: [...])")
	}
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		name := k.Value
		if _, dup := c.lines[name]; dup {
			return nil, c.errAt(k.Line, name, fmt.Sprintf("set twice (first at line %d)", c.lines[name]))
		}
		c.lines[name] = k.Line
		switch f := fs.Lookup(name); {
		case name == "routes":
			if err := c.decode(v, reflect.ValueOf(&c.routes).Elem(), "routes"); err != nil {
				return nil, err
			}
			for i := range c.routes {
				c.routes[i].Source = fmt.Sprintf("%s:%d", path, c.lines[fmt.Sprintf("routes[%d]", i)])
			}
		case f == nil || slices.Contains(notKeys, name):
			return nil, c.errAt(k.Line, name, "unknown field: the fields are the flags of idem serve ('idem help serve') and routes")
		default:
			value, err := flagValue(v, slices.Contains(listFlags, name))
			if err != nil {
				return nil, c.errAt(v.Line, name, err.Error())
			}
			c.values[name] = value
		}
	}
	return c, nil
}

// flagValue is a top-level setting as its flag takes it.
func flagValue(v *yaml.Node, list bool) (string, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
		return v.Value, nil
	case v.Kind == yaml.SequenceNode && list:
		items := make([]string, len(v.Content))
		for i, item := range v.Content {
			if item = resolve(item); item.Kind != yaml.ScalarNode || strings.Contains(item.Value, ",") {
				return "", fmt.Errorf("item %d: want a single name, without a comma", i)
			}
			items[i] = item.Value
		}
		return strings.Join(items, ","), nil
	case list:
		return "", errors.New("want a list, e.g. [POST, PATCH], or a comma-separated string")
	}
	return "", errors.New("want a single value (a string, number, duration or true/false)")
}

// at is where the file sets name: "path:line".
func (c *configFile) at(name string) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", c.path, c.lines[name])
}

// configError is a bad setting of the config file.
type configError struct {
	path  string
	line  int
	field string
	msg   string
}

func (e *configError) Error() string {
	if e.field == "" {
		return fmt.Sprintf("%s:%d: %s", e.path, e.line, e.msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.path, e.line, e.field, e.msg)
}

func (c *configFile) errAt(line int, field, msg string) error {
	return &configError{path: c.path, line: line, field: field, msg: msg}
}

// resolve follows a YAML alias (*name) to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

var durationType = reflect.TypeFor[time.Duration]()

// decode sets v, a route or one of its fields, from n strictly, recording
// the line of every field at its path.
func (c *configFile) decode(n *yaml.Node, v reflect.Value, path string) error {
	n = resolve(n)
	if c.lines[path] == 0 {
		c.lines[path] = n.Line
	}
	if n.Tag == "!!null" {
		return c.errAt(n.Line, path, "no value: give one, or leave the field out for the default")
	}
	switch {
	case v.Kind() == reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		return c.decode(n, v.Elem(), path)
	case v.Kind() == reflect.Struct:
		return c.decodeStruct(n, v, path)
	case v.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return c.errAt(n.Line, path, "want a list, e.g. [a, b]")
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := c.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case n.Kind != yaml.ScalarNode:
		return c.errAt(n.Line, path, "want a single value, not a list or a mapping")
	case v.Type() == durationType:
		d, err := time.ParseDuration(n.Value)
		if err != nil {
			return c.errAt(n.Line, path, fmt.Sprintf("%q is not a duration: want a number with a unit, e.g. 30s, 5m or 1h30m", n.Value))
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if err != nil || n.Tag != "!!bool" {
			return c.errAt(n.Line, path, fmt.Sprintf("%q: want true or false", n.Value))
		}
		v.SetBool(b)
	case v.Kind() == reflect.String:
		v.SetString(n.Value)
	default:
		panic("config: no decoding for " + v.Type().String())
	}
	return nil
}

func (c *configFile) decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	fields := map[string]int{}
	var names []string
	for i := range v.NumField() {
		if tag := v.Type().Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			fields[tag] = i
			names = append(names, tag)
		}
	}
	if n.Kind != yaml.MappingNode {
		return c.errAt(n.Line, path, "want a mapping of "+strings.Join(names, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i < len(n.Content); i += 2 {
		k, value := n.Content[i], n.Content[i+1]
		field := path + "." + k.Value
		j, known := fields[k.Value]
		switch {
		case !known:
			return c.errAt(k.Line, field, "unknown field; the fields here are "+strings.Join(names, ", "))
		case seen[k.Value]:
			return c.errAt(k.Line, field, "set twice")
		}
		seen[k.Value] = true
		c.lines[field] = k.Line
		if err := c.decode(value, v.Field(j), field); err != nil {
			return err
		}
	}
	return nil
}
