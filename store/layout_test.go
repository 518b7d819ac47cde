package store_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The layout stays free of cycles, as package store's documentation says:
// store imports only the standard library, and no backend under store/
// imports the root package idem (their tests may: they run the engine).
func TestStoresDoNotImportTheRoot(t *testing.T) {
	const root = "github.com/idemkit/idem"
	dirs, err := filepath.Glob("*")
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, ".")
	checked := 0
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				switch {
				case path == root:
					t.Errorf("%s imports the root package %s: a store must need only package store", f, root)
				case dir == "." && strings.Contains(path, "."):
					t.Errorf("%s (package store) imports %s: it imports only the standard library", f, path)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d files; want every non-test file of store/ and its backends", checked)
	}
}
