package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/testinfra/golden"
)

// The pages of docs/reference are written from the code by these tests
// (with -update) and held to it (without): a flag, a route key, a problem
// code or a subcommand added without its page fails here.
var update = flag.Bool("update", false, "rewrite the pages of docs/reference from the code")

const regenerate = "go test ./cmd/idem -run TestReference -update"

// holdReference compares the committed page with got, or writes got with -update.
func holdReference(t *testing.T, page string, got []byte) {
	t.Helper()
	golden.Hold(t, filepath.Join("..", "..", "docs", "reference", page), got, *update, regenerate)
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
An IDEM_ variable that names no flag (a misspelling), or names one that only the
command line takes, is refused at start.
In the file, the flags that take a comma-separated list take a YAML list.
SIGHUP reloads the file: ` + "`GET /v1/config`" + ` of the admin API shows what runs.
The reload column says whether a reload applies a changed value (yes), or
refuses the whole file until a restart (restart: cmd/idem/reload.go,
restartOnly); [Reloading](../configuration.md#reloading) says what else a reload does.

| flag | config key | environment | default | reload | meaning |
|---|---|---|---|---|---|
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
		reload := "yes"
		switch {
		case slices.Contains(commandLineOnly, f.Name):
			reload = "(command line only)"
		case f.Name == "config":
			reload = "(the file is read again)"
		case slices.Contains(restartOnly, f.Name):
			reload = "restart"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s | %s |\n", f.Name, key, env, cell(def), reload, cell(f.Usage))
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

// problemCode is a problem code as its Go constant declares it.
type problemCode struct {
	value, pkg, status, meaning string
	answered                    map[string]bool // the statuses the calls that write it give
}

// codeComment reads a code constant's comment: "400: meaning",
// "404 (admin API): meaning", "CodeName (412): meaning" or
// "CodeName (403, admin API): meaning".
var codeComment = regexp.MustCompile(`^(?:Code\w+ )?\(?(\d{3})(?:,? ?\(?([^):]*)\)?)?\)?: (.+)$`)

// httpStatuses maps the names of net/http's status constants to their values.
func httpStatuses() map[string]string {
	m := map[string]string{}
	name := strings.NewReplacer(" ", "", "-", "", "'", "")
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			m["Status"+name.Replace(text)] = strconv.Itoa(code)
		}
	}
	return m
}

// TestReferenceErrors writes every problem code that idemhttp and the
// gateway declare (a constant Code... = "..."), with the status and the
// meaning its comment gives, and holds the comment to the calls: every
// call that writes a code with a constant status (WriteProblem, WriteError,
// reject, ..., a Problem literal) gives the status the comment says, and
// none writes a code that is not a declared constant.
func TestReferenceErrors(t *testing.T) {
	dirs := map[string]string{"idemhttp": "../../idemhttp", "gateway": "../../internal/gateway", "cmd/idem": "."}
	codes := map[string]*problemCode{} // by constant name
	byValue := map[string]*problemCode{}
	files := map[string][]*ast.File{}
	for _, pkg := range []string{"idemhttp", "gateway", "cmd/idem"} {
		files[pkg] = parseDir(t, dirs[pkg])
		for _, f := range files[pkg] {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i >= len(vs.Values) {
							break
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !strings.HasPrefix(name.Name, "Code") || !ok || lit.Kind != token.STRING {
							continue // not a code, or an alias of another package's
						}
						value, _ := strconv.Unquote(lit.Value)
						doc := vs.Doc
						if doc == nil && len(gd.Specs) == 1 {
							doc = gd.Doc
						}
						text := strings.Join(strings.Fields(doc.Text()+" "+vs.Comment.Text()), " ")
						m := codeComment.FindStringSubmatch(text)
						if m == nil {
							t.Errorf("%s.%s: its comment %q does not begin with its status (\"409: meaning\", \"409 (admin API): meaning\" or \"%s (409): meaning\")", pkg, name.Name, text, name.Name)
							continue
						}
						meaning := m[3]
						if m[2] != "" {
							meaning = m[2] + ": " + meaning
						}
						c := &problemCode{value: value, pkg: pkg, status: m[1], meaning: meaning, answered: map[string]bool{}}
						if byValue[value] != nil {
							t.Errorf("%s.%s: the code %q is declared twice", pkg, name.Name, value)
						}
						codes[name.Name], byValue[value] = c, c
					}
				}
			}
		}
	}
	statuses := httpStatuses()
	// written records that a call gives code the status expr (when it is a constant).
	written := func(status, code ast.Expr) {
		if lit, ok := code.(*ast.BasicLit); ok && lit.Kind == token.STRING && isStatus(status) {
			t.Errorf("a problem code written as the literal %s: declare it as a Code constant with its status and meaning", lit.Value)
			return
		}
		var name string
		switch e := code.(type) {
		case *ast.Ident:
			name = e.Name
		case *ast.SelectorExpr:
			name = e.Sel.Name
		}
		c := codes[name]
		if c == nil {
			return
		}
		if isStatus(status) {
			c.answered[statuses[status.(*ast.SelectorExpr).Sel.Name]] = true
		} else {
			c.answered["(set at run time)"] = true
		}
	}
	for _, pkg := range []string{"idemhttp", "gateway", "cmd/idem"} {
		for _, f := range files[pkg] {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					for i := 0; i+1 < len(n.Args); i++ {
						if isStatus(n.Args[i]) || codeName(n.Args[i+1]) {
							written(n.Args[i], n.Args[i+1])
						}
					}
				case *ast.CompositeLit:
					var status, code ast.Expr
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							switch {
							case isIdent(kv.Key, "Status"):
								status = kv.Value
							case isIdent(kv.Key, "Code"):
								code = kv.Value
							}
						}
					}
					if status != nil && code != nil {
						written(status, code)
					}
				}
				return true
			})
		}
	}
	var names []string
	for name := range codes {
		names = append(names, name)
	}
	order := map[string]string{"idemhttp": "1", "gateway": "2", "cmd/idem": "3"} // the client's codes first
	slices.SortFunc(names, func(a, b string) int {
		return strings.Compare(order[codes[a].pkg]+codes[a].value, order[codes[b].pkg]+codes[b].value)
	})
	var b strings.Builder
	b.WriteString(`# Problem codes

Generated from the code constants of idemhttp and internal/gateway and their
comments; do not edit: ` + "`" + regenerate + "`" + ` rewrites it, and
fails when a call writes a code with another status than its comment says.

Every error answer is ` + "`application/problem+json`" + ` (RFC 9457) with a
stable ` + "`code`" + ` member; clients branch on it, never on ` + "`detail`" + `.
The codes of idemhttp are answered by the middleware and by the gateway
(` + "`idem serve`" + `), which adds its own. With ` + "`--error-format stripe`" + ` the same
codes come as Stripe's error object, some with Stripe's statuses
(idemhttp/errorformat.go). Each code's ` + "`type`" + ` URI links to its longer
explanation in docs/problems.md.

| code | status | declared in | meaning |
|---|---|---|---|
`)
	for _, name := range names {
		c := codes[name]
		if len(c.answered) == 0 {
			t.Errorf("%s.%s (%q): no call writes it; remove it, or write it with its status next to it", c.pkg, name, c.value)
		}
		for st := range c.answered {
			if st != c.status && st != "(set at run time)" {
				t.Errorf("%s.%s (%q): a call answers it with %s, its comment says %s", c.pkg, name, c.value, st, c.status)
			}
		}
		fmt.Fprintf(&b, "| <a id=\"%s\"></a>`%s` | %s | %s | %s |\n", c.value, c.value, c.status, c.pkg, cell(c.meaning))
	}
	holdReference(t, "errors.md", []byte(b.String()))
}

// isStatus reports whether e is one of net/http's status constants.
func isStatus(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && isIdent(sel.X, "http") && strings.HasPrefix(sel.Sel.Name, "Status")
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// codeName reports whether e names a Code constant (CodeX or pkg.CodeX).
func codeName(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return strings.HasPrefix(e.Name, "Code")
	case *ast.SelectorExpr:
		return strings.HasPrefix(e.Sel.Name, "Code")
	}
	return false
}

// referencePages are the pages of docs/reference and what each holds;
// TestReferenceIndex fails on a file of the folder that is not here.
var referencePages = []struct{ file, what, writer string }{ // writer: how the page is written, Markdown
	{"config.md", "every flag of `idem serve` with its config file key, environment variable, default and meaning; the keys of a route", "`go test ./cmd/idem -run TestReference -update`"},
	{"errors.md", "every problem `code` of idemhttp and the gateway, with its HTTP status and meaning", "`go test ./cmd/idem -run TestReference -update`"},
	{"metrics.md", "every Prometheus metric of the gateway: type, labels, when it is exported, help", "`go test ./internal/gateway -run TestReference -update`"},
	{"admin-openapi.json", "the admin API as an OpenAPI 3.1 document, also served by it at `GET /v1/openapi.json`", "written by hand as internal/gateway/admin-openapi.json (embedded in the binary), copied here by `go test ./internal/gateway -run TestReference -update`"},
}

// TestReferenceIndex writes docs/reference/README.md: the pages, and the
// subcommands of idem as its usage lists them.
func TestReferenceIndex(t *testing.T) {
	var b strings.Builder
	b.WriteString(`# Reference

Pages written from the code, and held to it by tests: a flag, a code, a
metric or an admin route added without its line fails ` + "`go test`" + `, which
names the command that rewrites the page. This index is written by
` + "`" + regenerate + "`" + ` too.

| page | what it holds | rewritten by |
|---|---|---|
`)
	listed := map[string]bool{"README.md": true}
	for _, p := range referencePages {
		listed[p.file] = true
		fmt.Fprintf(&b, "| [%s](%s) | %s | %s |\n", p.file, p.file, p.what, p.writer)
	}
	entries, err := os.ReadDir(filepath.Join("..", "..", "docs", "reference"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !listed[e.Name()] {
			t.Errorf("docs/reference/%s is not in referencePages (reference_test.go): add it to the index", e.Name())
		}
	}
	b.WriteString(`
## Commands

` + "`idem help`" + ` lists them; ` + "`idem help COMMAND`" + ` prints a command's flags. Every
flag can also be set as ` + "`IDEM_FLAG_NAME`" + ` in the environment.

| command | what it does |
|---|---|
`)
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(&b, "| `idem %s` | %s |\n", name, cell(commands[name].summary))
	}
	holdReference(t, "README.md", []byte(b.String()))
}
