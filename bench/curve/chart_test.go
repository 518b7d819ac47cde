package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const sampleCSV = `sweep,impl,concurrency,stored_keys,cycles,seconds,cycles_per_s,x_naive
concurrency,naive,1,0,20000,1.000,20000,1.000
concurrency,idem-memory,1,0,200000,1.000,200000,10.000
concurrency,naive,4,0,40000,1.000,40000,1.000
concurrency,idem-memory,4,0,300000,1.000,300000,7.500
concurrency,naive,2,0,30000,1.000,30000,1.000
concurrency,idem-memory,2,0,250000,1.000,250000,8.333
keys,naive,64,0,50000,2.000,25000,1.000
keys,idem-memory,64,0,500000,2.000,250000,10.000
keys,naive,64,1000000,48000,2.000,24000,1.000
keys,idem-memory,64,1000000,400000,2.000,200000,8.333
`

const sampleMemory = `backend,records,added,bytes,bytes_per_record,measured_by
redis-idem,10000,10000,5000000,500,Redis INFO used_memory
redis-idem,1000000,990000,396000000,400,Redis INFO used_memory
memory,1000000,1000000,850000000,850,Go heap in use after GC
`

// svgDoc is the part of an SVG the tests look at.
type svgDoc struct {
	Polylines []struct {
		Points string `xml:"points,attr"`
		Title  string `xml:"title"`
	} `xml:"polyline"`
	Texts []string `xml:"text"`
}

func parseSVG(t *testing.T, path string) svgDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s is not well-formed XML: %v", path, err)
	}
	return doc
}

func TestRenderAll(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "curve.csv"), []byte(sampleCSV), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.csv"), []byte(sampleMemory), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := renderAll(dir); err != nil {
		t.Fatal(err)
	}

	conc := parseSVG(t, filepath.Join(dir, "concurrency.svg"))
	if len(conc.Polylines) != 2 || conc.Polylines[0].Title != "naive" || conc.Polylines[1].Title != "idem-memory" {
		t.Fatalf("concurrency.svg lines = %+v; want naive then idem-memory", conc.Polylines)
	}
	// Points sorted by concurrency, on a log2 axis: 1, 2, 4 are evenly
	// spaced; the memory store is above (a smaller y) the naive lock.
	naive, memory := points(t, conc.Polylines[0].Points), points(t, conc.Polylines[1].Points)
	if len(naive) != 3 {
		t.Fatalf("naive has %d points; want 3", len(naive))
	}
	if d1, d2 := naive[1][0]-naive[0][0], naive[2][0]-naive[1][0]; d1 <= 0 || d1 != d2 {
		t.Errorf("x steps %v, %v; want equal and positive on a log2 axis", d1, d2)
	}
	if !(naive[0][1] > naive[1][1] && naive[1][1] > naive[2][1]) {
		t.Errorf("naive y = %v; want rising cycles/s drawn higher (smaller y)", naive)
	}
	for i := range naive {
		if memory[i][1] >= naive[i][1] {
			t.Errorf("point %d: idem-memory y %v not above naive %v", i, memory[i][1], naive[i][1])
		}
	}
	for _, want := range []string{"1", "2", "4", "10k", "100k", "concurrent goroutines (log2)", "Cycles per second by concurrency (0 stored records)"} {
		if !containsText(conc.Texts, want) {
			t.Errorf("concurrency.svg lacks text %q; has %q", want, conc.Texts)
		}
	}

	keys := parseSVG(t, filepath.Join(dir, "keys.svg"))
	if len(keys.Polylines) != 2 || len(points(t, keys.Polylines[1].Points)) != 2 {
		t.Fatalf("keys.svg lines = %+v; want 2 lines of 2 points", keys.Polylines)
	}
	for _, want := range []string{"0", "1M", "Cycles per second by stored records (64 goroutines)"} {
		if !containsText(keys.Texts, want) {
			t.Errorf("keys.svg lacks text %q; has %q", want, keys.Texts)
		}
	}

	sweep, err := os.ReadFile(filepath.Join(dir, "curve.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| implementation | 1 | 2 | 4 |\n", // sorted by concurrency
		"| idem-memory | 200k (10.00×) | 250k (8.33×) | 300k (7.50×) |\n",
		"by stored records, at 64 goroutines\n\n| implementation | 0 | 1M |\n",
		"| naive | 25k (1.00×) | 24k (1.00×) |\n",
	} {
		if !strings.Contains(string(sweep), want) {
			t.Errorf("curve.md =\n%s\nlacks %q", sweep, want)
		}
	}

	table, err := os.ReadFile(filepath.Join(dir, "memory.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The largest fill of each backend, in the order they first appear.
	want := "| redis-idem | 1M | 400 | Redis INFO used_memory |\n| memory | 1M | 850 | Go heap in use after GC |\n"
	if !strings.HasSuffix(string(table), want) {
		t.Errorf("memory.md =\n%s\nwant it to end with\n%s", table, want)
	}
}

func points(t *testing.T, s string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for f := range strings.FieldsSeq(s) {
		var p [2]float64
		if _, err := fmt.Sscanf(f, "%f,%f", &p[0], &p[1]); err != nil {
			t.Fatalf("point %q: %v", f, err)
		}
		out = append(out, p)
	}
	return out
}

func containsText(texts []string, want string) bool {
	for _, s := range texts {
		if strings.TrimSpace(s) == want {
			return true
		}
	}
	return false
}

func TestWriteReadRows(t *testing.T) {
	rows := []row{{sweep: "keys", impl: "naive", concurrency: 64, stored: 100000, cycles: 50000, seconds: 2, xNaive: 1}}
	path := filepath.Join(t.TempDir(), "curve.csv")
	if err := writeRows(path, rows); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := readRows(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != rows[0] || got[0].perSecond() != 25000 {
		t.Errorf("read back %+v; want %+v at 25000 cycles/s", got, rows)
	}
}

func TestReadRowsErrors(t *testing.T) {
	head := strings.SplitN(sampleCSV, "\n", 2)[0] + "\n"
	for name, in := range map[string]string{
		"empty":           "",
		"wrong header":    "a,b,c,d,e,f,g,h\n",
		"short line":      head + "keys,naive,64\n",
		"bad concurrency": head + "keys,naive,x,0,1,1.0,1,1\n",
		"bad seconds":     head + "keys,naive,1,0,1,NaN,1,1\n",
		"zero seconds":    head + "keys,naive,1,0,1,0,1,1\n",
		"unknown sweep":   head + "other,naive,1,0,1,1.0,1,1\n",
	} {
		if _, err := readRows(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, _, err := charts(nil); err == nil {
		t.Error("charts of no rows: no error")
	}
	if err := renderAll(t.TempDir()); err == nil {
		t.Error("renderAll without curve.csv: no error")
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1k", 10000: "10k", 1500000: "1.5M", 10000000: "10M"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q; want %q", n, got, want)
		}
	}
}
