package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/gateway"
)

// The pages of docs/reference are written from the code by these tests
// (with -update) and held to it (without): a flag, a route key, a problem
// code or a subcommand added without its page fails here.
var update = flag.Bool("update", false, "rewrite the pages of docs/reference from the code")

const regenerate = "go test ./cmd/idem -run TestReference -update"

// holdReference compares the committed page with got, or writes got with -update.
func holdReference(t *testing.T, page string, got []byte) {
	t.Helper()
	path := filepath.Join("..", "..", "docs", "reference", page)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; write it with: %s", err, regenerate)
	}
	if !bytes.Equal(want, got) {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
		i := 0
		for i < len(wl) && i < len(gl) && wl[i] == gl[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Errorf("docs/reference/%s is not what the code generates; regenerate it with:\n\t%s\nfirst difference, line %d:\n\tcommitted: %s\n\tgenerated: %s",
			page, regenerate, i+1, line(wl), line(gl))
	}
}

// cell makes s fit in a cell of a Markdown table.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

// computedDefaults are the defaults of idem serve that depend on the
// machine, said in words so that the page does not.
var computedDefaults = map[string]string{"max-conns": "the open-file limit less 1024"}

func TestReferenceConfig(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	defineServeFlags(fs, &serveFlags{})
	var b strings.Builder
	b.WriteString(`# idem serve: flags, config file keys, environment variables

Generated from the flag set of ` + "`idem serve`" + ` (cmd/idem/serve.go, defineServeFlags)
and the route type of the gateway; do not edit: ` + "`" + regenerate + "`" + ` rewrites it.

Every setting is a flag, a key of the YAML config file (` + "`--config`" + `) and an
environment variable. A flag on the command line wins over its variable, which
wins over the file, which wins over the default (cmd/idem/settings.go, resolveFlags).
In the file, the flags that take a comma-separated list take a YAML list.
SIGHUP reloads the file: ` + "`GET /v1/config`" + ` of the admin API shows what runs.

| flag | config key | environment | default | meaning |
|---|---|---|---|---|
`)
	fs.VisitAll(func(f *flag.Flag) {
		key, env := "`"+f.Name+"`", "`"+envName(f.Name)+"`"
		switch {
		case slices.Contains(commandLineOnly, f.Name):
			key, env = "(command line only)", "(command line only)"
		case f.Name == "config":
			key = "(the file itself)"
		}
		if slices.Contains(listFlags, f.Name) {
			key += " (a list)"
		}
		def := "`" + f.DefValue + "`"
		if d, ok := computedDefaults[f.Name]; ok {
			def = d
		} else if f.DefValue == "" {
			def = "(none)"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s |\n", f.Name, key, env, cell(def), cell(f.Usage))
	})
	b.WriteString(`
## Routes

The file's ` + "`routes`" + ` is a list of per-route policies (gateway.Route in
internal/gateway/routes.go). A request takes the policy of the route whose
` + "`match`" + ` is the most specific that matches it; a key a route leaves out
takes the top-level setting.

| key | type | meaning |
|---|---|---|
`)
	docs := fieldDocs(t, filepath.Join("..", "..", "internal", "gateway"))
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			field := typ.Field(i)
			tag := field.Tag.Get("yaml")
			if tag == "" || tag == "-" {
				continue
			}
			doc := docs[typ.Name()+"."+field.Name] // "Lease is how long ...": "how long ..."
			if rest, ok := strings.CutPrefix(doc, field.Name+" "); ok {
				doc = strings.TrimPrefix(strings.TrimPrefix(rest, "is "), "are ")
			}
			if doc == "" {
				t.Errorf("%s.%s (route key %s%s) has no comment to say what it means", typ.Name(), field.Name, prefix, tag)
			}
			ft := field.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			fmt.Fprintf(&b, "| `%s%s` | %s | %s |\n", prefix, tag, yamlType(ft), cell(doc))
			if ft.Kind() == reflect.Struct {
				walk(ft, prefix+tag+".")
			}
		}
	}
	walk(reflect.TypeFor[gateway.Route](), "")
	holdReference(t, "config.md", []byte(b.String()))
}

// yamlType names the YAML value a route key takes.
func yamlType(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case t.Kind() == reflect.Slice:
		return "list of " + yamlType(t.Elem())
	case t.Kind() == reflect.Struct:
		return "mapping"
	}
	return t.Kind().String()
}

// fieldDocs returns the comment of every field of the struct types in
// the package at dir, by "Type.Field", each on one line.
func fieldDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for _, file := range parseDir(t, dir) {
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, f := range st.Fields.List {
				text := strings.Join(strings.Fields(f.Doc.Text()+" "+f.Comment.Text()), " ")
				for _, name := range f.Names {
					docs[spec.Name.Name+"."+name.Name] = text
				}
			}
			return false
		})
	}
	return docs
}

// parseDir parses the Go files of dir but its tests, with their comments.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}
