package idem_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeLayout holds the README's Layout section to the tree: every
// top-level folder, every program in bench/, every script, every internal
// package and every doc is named there, and every Makefile target is
// listed by `make help` and named there too. A newcomer reads the map
// before the code; a folder added without a line in it fails here.
func TestReadmeLayout(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	ignored := rootIgnores(t)
	want := func(what, text string) {
		t.Helper()
		if !strings.Contains(layout, text) {
			t.Errorf("README.md's Layout does not name %s (want %s in it)", what, text)
		}
	}
	for _, e := range readDir(t, ".") {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
			want("the folder "+e.Name(), "`"+e.Name()+"/")
		}
	}
	for _, dir := range []string{"bench", "scripts"} {
		for _, e := range readDir(t, dir) {
			if p := dir + "/" + e.Name(); !ignored[p] {
				want(p, "`"+p+"`")
			}
		}
	}
	for _, e := range readDir(t, "docs") {
		want("docs/"+e.Name(), "docs/"+e.Name())
	}
	err = filepath.WalkDir("internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if gos, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gos) > 0 {
			want("the package "+path, "`"+filepath.ToSlash(path)+"`")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range makeTargets(t) {
		want("the make target "+target, "`"+target+"`")
	}
}

func readDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// rootIgnores returns the paths .gitignore ignores from the root
// ("/check-out/", "/bench/curve/curve"): build outputs, not the map's.
func rootIgnores(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(".gitignore")
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "/"); ok {
			ignored[strings.TrimSuffix(p, "/")] = true
		}
	}
	return ignored
}

// makeTargets returns the Makefile's targets, and fails the test for one
// without the "## " comment that `make help` lists it by.
func makeTargets(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	target := regexp.MustCompile(`^([a-z][a-z-]*):`)
	var targets []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		m := target.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		targets = append(targets, m[1])
		if !strings.Contains(sc.Text(), "## ") {
			t.Errorf("make target %s has no ## comment: make help does not list it", m[1])
		}
	}
	if len(targets) == 0 {
		t.Fatal("no targets found in the Makefile")
	}
	return targets
}
