package idem_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// goBlock is a fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// The README's complete Go programs (its ```go blocks that start with
// "package main": the library quick start) compile against this module
// and pass go vet, so that a newcomer can paste each one as it is.
func TestREADMEProgramsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet on each program")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range goBlock.FindAllSubmatch(readme, -1) {
		src := m[1]
		if !regexp.MustCompile(`^package main\n`).Match(src) {
			continue
		}
		n++
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
		// Run from the module root: a file outside it builds against
		// this module's packages and dependencies.
		cmd := exec.Command(goTool, "vet", file)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README program %d does not pass go vet: %v\n%s\n--- program:\n%s", n, err, out, src)
		}
	}
	if n < 4 {
		t.Errorf("README has %d complete Go programs; want the quick start's 4 (store, engine, middleware, Do)", n)
	}
}
