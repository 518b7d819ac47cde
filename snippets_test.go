package idem_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDocSnippets compiles every Go snippet of README.md and docs/**/*.md
// (each fenced block whose info string is "go"), and runs those that say
// what they print, holding them to it. A newcomer pastes these; one that
// does not build, or does not do what the page says, is a defect.
//
// The convention, for whoever writes the pages:
//
//   - A block that starts with "package" is a whole file, built as it is
//     (go vet) against this module.
//   - A block that is a fragment (statements) is preceded by the comment
//     <!-- snippet: NAME --> (blank lines between are fine), where
//     testdata/snippets/NAME.go is a wrapper: a Go file with the line
//     "// SNIPPET" where the fragment goes, declaring what the fragment
//     uses without defining it (a store, a request, the caller's own
//     functions). A wrapper whose first line is "// module: DIR" is built
//     in the module in DIR (examples/natsconsumer is its own module).
//   - A whole program preceded by <!-- snippet: run --> is also run (go
//     run), and what it prints must be the next fenced block after it, a
//     ```text block: a page that says "it prints" is held to it.
//
// A fragment without a wrapper, a wrapper without its marker line and a
// run without its output are errors, so that no snippet goes unchecked.
func TestDocSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every Go snippet of the docs")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	pages := []string{"README.md"}
	err = filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range fencedBlocks(src) {
			if b.lang != "go" {
				continue
			}
			n++
			name := page + ":" + b.line
			t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
				checkSnippet(t, goTool, page, b)
			})
		}
	}
	if n < 10 {
		t.Errorf("found %d Go snippets in README.md and docs/; the README alone has 2, docs/library.md 6: is the parser broken?", n)
	}
}

// block is one fenced block of a Markdown page.
type block struct {
	lang      string // the info string's first word
	line      string // where it starts, for messages
	code      string
	directive string // the <!-- snippet: ... --> before it, if any
	next      *block // the fenced block after it
}

var directiveLine = regexp.MustCompile(`^<!--\s*snippet:\s*(.*?)\s*-->\s*$`)

// fencedBlocks returns the fenced blocks of a Markdown page (``` or ~~~
// fences, indented by at most 3 spaces), each with the snippet directive
// written right before it.
func fencedBlocks(src []byte) []*block {
	var blocks []*block
	var cur *block
	var fence, directive string
	var code strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		trimmed := strings.TrimLeft(text, " ")
		indented := len(text)-len(trimmed) <= 3
		switch {
		case cur != nil && indented && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(trimmed[len(fence):]) == "":
			cur.code = code.String()
			if len(blocks) > 0 {
				blocks[len(blocks)-1].next = cur
			}
			blocks = append(blocks, cur)
			cur = nil
		case cur != nil:
			code.WriteString(text + "\n")
		case indented && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			for strings.HasPrefix(trimmed[len(fence):], fence[:1]) {
				fence += fence[:1]
			}
			info := strings.Fields(trimmed[len(fence):])
			lang := ""
			if len(info) > 0 {
				lang = info[0]
			}
			cur = &block{lang: lang, line: strconv.Itoa(line), directive: directive}
			code.Reset()
			directive = ""
		case directiveLine.MatchString(text):
			directive = directiveLine.FindStringSubmatch(text)[1]
		case strings.TrimSpace(text) != "":
			directive = "" // a directive belongs to the block right after it
		}
	}
	return blocks
}

// checkSnippet builds b (and runs it when its directive says so).
func checkSnippet(t *testing.T, goTool, page string, b *block) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	src, dir := b.code, root
	whole := strings.HasPrefix(strings.TrimSpace(src), "package ")
	run := b.directive == "run"
	switch {
	case run && !whole:
		t.Fatalf("<!-- snippet: run --> before a fragment: only a whole program runs")
	case whole && b.directive != "" && !run:
		t.Fatalf("<!-- snippet: %s --> before a whole file: a wrapper is for fragments", b.directive)
	case !whole && b.directive == "":
		t.Fatalf("a Go fragment without <!-- snippet: NAME --> before it, naming its wrapper testdata/snippets/NAME.go (see TestDocSnippets):\n%s", src)
	case !whole:
		wrapper, err := os.ReadFile(filepath.Join("testdata", "snippets", b.directive+".go"))
		if err != nil {
			t.Fatalf("the wrapper of <!-- snippet: %s -->: %v", b.directive, err)
		}
		w := string(wrapper)
		if m := regexp.MustCompile(`^// module: (\S+)\n`).FindStringSubmatch(w); m != nil {
			dir = filepath.Join(root, m[1])
		}
		at := regexp.MustCompile(`(?m)^\s*// SNIPPET\n`).FindStringIndex(w)
		if at == nil {
			t.Fatalf("testdata/snippets/%s.go has no // SNIPPET line", b.directive)
		}
		src = w[:at[0]] + src + w[at[1]:]
	}
	file := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// From inside the module: a file outside it builds against the
	// module's packages and dependencies.
	vet := exec.Command(goTool, "vet", file)
	vet.Dir = dir
	if out, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("%s does not pass go vet: %v\n%s\n--- as built:\n%s", page, err, out, numbered(src))
	}
	if !run {
		return
	}
	if b.next == nil || b.next.lang != "text" {
		t.Fatalf("<!-- snippet: run --> with no ```text block after the program: say what it prints")
	}
	cmd := exec.Command(goTool, "run", file)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running it: %v\n%s", err, stderr.Bytes())
	}
	if got, want := strings.TrimSpace(stdout.String()), strings.TrimSpace(b.next.code); got != want {
		t.Fatalf("%s says it prints\n%s\nit prints\n%s", page, want, got)
	}
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
