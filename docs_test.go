package idem_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// Pages a newcomer reads at one sitting: the README is the first ten
// minutes, every other page one question. The generated reference
// (docs/reference/) is as long as what it lists.
const (
	readmeMaxLines = 250
	docMaxLines    = 400
)

// docPages returns README.md and every Markdown page under docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, filepath.ToSlash(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// TestDocPagesAreShort holds README.md to 250 lines and every page of
// docs/ but the generated reference to 400.
func TestDocPagesAreShort(t *testing.T) {
	for _, page := range docPages(t) {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(src, []byte("\n"))
		limit := docMaxLines
		switch {
		case page == "README.md":
			limit = readmeMaxLines
		case strings.HasPrefix(page, "docs/reference/"):
			continue
		}
		if lines > limit {
			t.Errorf("%s has %d lines; at most %d: split it by the reader's question", page, lines, limit)
		}
	}
}

// TestDocLinksResolve follows every relative link of README.md and
// docs/**/*.md: the file or folder must exist, and an #anchor must be a
// heading of the page it points into (GitHub's slugs) or an explicit
// id. A page split or a heading renamed without its links fails here.
func TestDocLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{} // page -> its anchors, read once
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		anchors[page] = pageAnchors(src)
		return anchors[page]
	}
	n := 0
	for _, page := range docPages(t) {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range pageLinks(src) {
			n++
			target, anchor, _ := strings.Cut(l.target, "#")
			file := page
			if target != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(page), target))
				if strings.HasPrefix(file, "docs/reference/") && !referenceGenerated {
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", page, l.line, l.target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchorsOf(file)[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading with the anchor #%s", page, l.line, l.target, file, anchor)
			}
		}
	}
	if n < 50 {
		t.Errorf("found %d relative links in README.md and docs/: is the parser broken?", n)
	}
}

// referenceGenerated says whether docs/reference/ exists: it is generated
// from the code on its own branch, and until then the pages link to it
// unchecked.
var referenceGenerated = func() bool {
	_, err := os.Stat("docs/reference")
	return err == nil
}()

type docLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	htmlID     = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// pageLinks returns the relative inline links of a Markdown page outside
// fenced blocks and code spans.
func pageLinks(src []byte) []docLink {
	var links []docLink
	eachProseLine(src, func(n int, text string) {
		text = codeSpan.ReplaceAllString(text, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			target := strings.Trim(m[1], "<>")
			if target == "" || scheme.MatchString(target) {
				continue
			}
			links = append(links, docLink{line: n, target: target})
		}
	})
	return links
}

// pageAnchors returns the anchors GitHub gives a page's headings (with
// -1, -2... for repeats) and its explicit <a id> anchors.
func pageAnchors(src []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(src, func(_ int, text string) {
		for _, m := range htmlID.FindAllStringSubmatch(text, -1) {
			anchors[m[1]] = true
		}
		trimmed := strings.TrimLeft(text, "#")
		if len(trimmed) == len(text) || len(text)-len(trimmed) > 6 || (trimmed != "" && trimmed[0] != ' ') {
			return
		}
		slug := headingSlug(trimmed)
		if k := seen[slug]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	})
	return anchors
}

var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// headingSlug is GitHub's anchor of a heading: its text (links reduced to
// their text), lower-cased, without punctuation but hyphens and
// underscores, each space a hyphen.
func headingSlug(heading string) string {
	text := mdLink.ReplaceAllString(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(heading), "#")), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// eachProseLine calls f with each line of a Markdown page outside its
// fenced blocks.
func eachProseLine(src []byte, f func(n int, text string)) {
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		trimmed := strings.TrimLeft(text, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
			for strings.HasPrefix(trimmed[len(fence):], fence[:1]) {
				fence += fence[:1]
			}
		default:
			f(n, text)
		}
	}
}

// The slug rules, on headings these pages have.
func TestHeadingSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Repeatable Requests (`--repeatability`)":                "repeatable-requests---repeatability",
		"Stripe's format (`--error-format stripe`)":              "stripes-format---error-format-stripe",
		"IdemUnknownKeysGrowing":                                 "idemunknownkeysgrowing",
		"Checked like a database: histories, a model, a nemesis": "checked-like-a-database-histories-a-model-a-nemesis",
		"Near cache and removals (`?near_cache=on`)":             "near-cache-and-removals-near_cacheon",
		"See [the state machine](state-machine.md) first":        "see-the-state-machine-first",
		"Diátaxis, 2.0 ":                                         "diátaxis-20",
	} {
		if got := headingSlug(heading); got != want {
			t.Errorf("headingSlug(%q) = %q; want %q", heading, got, want)
		}
	}
}
