// Package golden holds a generated file to the code that generates it:
// the tests that write docs/reference compare the committed page with
// what they generate, or rewrite it when asked to.
package golden

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// Hold compares the committed file at path with got, or, with update,
// writes got there. A difference fails t with the first line that
// differs and regenerate, the command that rewrites the file.
func Hold(t testing.TB, path string, got []byte, update bool, regenerate string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; write it with: %s", err, regenerate)
	}
	if bytes.Equal(want, got) {
		return
	}
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
	t.Errorf("%s is not what the code generates; regenerate it with:\n\t%s\nfirst difference, line %d:\n\tcommitted: %s\n\tgenerated: %s",
		path, regenerate, i+1, line(wl), line(gl))
}
