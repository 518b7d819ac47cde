package check

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every mutation scripts/mutate.sh applies still applies to today's code
// and names a configuration this package runs: a patch that no longer
// applies measures nothing, and only make mutate would notice. (A hunk
// applies when its old lines, context and removed, stand in the file in
// that order; git is not needed, a fresh machine has none.)
func TestMutationsApply(t *testing.T) {
	patches, err := filepath.Glob("mutations/*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutations in internal/check/mutations: %v", err)
	}
	header := regexp.MustCompile(`(?m)^# config: (\S+)$`)
	for _, p := range patches {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m := header.FindSubmatch(text)
		if m == nil {
			t.Errorf("%s: no '# config: NAME' line", p)
		} else if !slices.ContainsFunc(configs(), func(c config) bool { return c.name == string(m[1]) }) {
			t.Errorf("%s: config %q is not one of the check's configurations", p, m[1])
		}
		hunks := 0
		var file string
		var old []string
		flush := func() {
			if old == nil {
				return
			}
			hunks++
			src, err := os.ReadFile(filepath.Join("../..", file))
			if err != nil {
				t.Errorf("%s: %v", p, err)
			} else if !strings.Contains(string(src), strings.Join(old, "\n")+"\n") {
				t.Errorf("%s no longer applies to %s; make it again against today's code (the hunk's old lines:\n%s)", p, file, strings.Join(old, "\n"))
			}
			old = nil
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(text), "\n"), "\n") {
			switch {
			case strings.HasPrefix(line, "--- "):
				flush()
			case strings.HasPrefix(line, "+++ b/"):
				file = strings.TrimPrefix(line, "+++ b/")
			case strings.HasPrefix(line, "@@"):
				flush()
				old = []string{}
			case old == nil:
			case strings.HasPrefix(line, " "), strings.HasPrefix(line, "-"):
				old = append(old, line[1:])
			case line == "":
				old = append(old, "") // an empty context line, trimmed by an editor
			}
		}
		flush()
		if hunks == 0 {
			t.Errorf("%s: no hunk", p)
		}
	}
}
