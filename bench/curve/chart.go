package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// renderAll draws concurrency.svg, keys.svg and memory.md in dir from its
// curve.csv and memory.csv.
func renderAll(dir string) error {
	rows, err := readFile(dir, "curve.csv", readRows)
	if err != nil {
		return err
	}
	conc, keys, err := charts(rows)
	if err != nil {
		return err
	}
	for name, c := range map[string]chart{"concurrency.svg": conc, "keys.svg": keys} {
		if err := os.WriteFile(filepath.Join(dir, name), c.svg(), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "curve.md"), sweepTables(rows), 0o644); err != nil {
		return err
	}
	mems, err := readFile(dir, "memory.csv", readMemory)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no fill, no memory figures
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "memory.md"), memoryTable(mems), 0o644)
}

// readFile reads the file name in dir with read; read's error is prefixed
// with the name.
func readFile[T any](dir, name string, read func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// charts builds the two charts from the rows: cycles/s against concurrency
// (log2 axis) from the concurrency sweep, and against stored records (one
// step per count) from the keys sweep.
func charts(rows []row) (conc, keys chart, err error) {
	byImpl := func(sweep string, x func(row) float64) []line {
		var lines []line
		for _, r := range rows {
			if r.sweep != sweep {
				continue
			}
			i := slices.IndexFunc(lines, func(l line) bool { return l.name == r.impl })
			if i < 0 {
				lines = append(lines, line{name: r.impl})
				i = len(lines) - 1
			}
			lines[i].points = append(lines[i].points, point{x(r), r.perSecond()})
		}
		for _, l := range lines {
			slices.SortFunc(l.points, func(a, b point) int { return cmpFloat(a.x, b.x) })
		}
		return lines
	}
	var concs []int
	var stored []int64
	var at, storedAt = -1, int64(-1)
	for _, r := range rows {
		switch r.sweep {
		case "concurrency":
			if !slices.Contains(concs, r.concurrency) {
				concs = append(concs, r.concurrency)
			}
			storedAt = r.stored
		case "keys":
			if !slices.Contains(stored, r.stored) {
				stored = append(stored, r.stored)
			}
			at = r.concurrency
		}
	}
	if len(concs) == 0 || len(stored) == 0 {
		return chart{}, chart{}, errors.New("the CSV needs rows of both sweeps, concurrency and keys")
	}
	slices.Sort(concs)
	slices.Sort(stored)
	conc = chart{
		title:  fmt.Sprintf("Cycles per second by concurrency (%s stored records)", count(storedAt)),
		xLabel: "concurrent goroutines (log2)", yLabel: "cycles/s (log)",
		lines: byImpl("concurrency", func(r row) float64 { return math.Log2(float64(r.concurrency)) }),
	}
	for _, c := range concs {
		conc.ticks = append(conc.ticks, tick{math.Log2(float64(c)), strconv.Itoa(c)})
	}
	keys = chart{
		title:  fmt.Sprintf("Cycles per second by stored records (%d goroutines)", at),
		xLabel: "stored records before the run", yLabel: "cycles/s (log)",
		lines: byImpl("keys", func(r row) float64 { return float64(slices.Index(stored, r.stored)) }),
	}
	for i, s := range stored {
		keys.ticks = append(keys.ticks, tick{float64(i), count(s)})
	}
	return conc, keys, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// count writes n as 0, 10k, 1.5M.
func count(n int64) string {
	f := float64(n)
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(f/1e6, 'f', -1, 64) + "M"
	case n >= 1_000:
		return strconv.FormatFloat(f/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// sweepTables is curve.md: for each sweep, a table of cycles/s and the
// ratio to the naive lock, one row per implementation, one column per
// point.
func sweepTables(rows []row) []byte {
	var b bytes.Buffer
	for _, sweep := range []string{"concurrency", "keys"} {
		var impls []string
		var cols []int64 // goroutines or stored records
		cells := map[string]map[int64]row{}
		at := 0
		for _, r := range rows {
			if r.sweep != sweep {
				continue
			}
			col := int64(r.concurrency)
			if sweep == "keys" {
				col, at = r.stored, r.concurrency
			}
			if cells[r.impl] == nil {
				impls = append(impls, r.impl)
				cells[r.impl] = map[int64]row{}
			}
			if !slices.Contains(cols, col) {
				cols = append(cols, col)
			}
			cells[r.impl][col] = r
		}
		if len(impls) == 0 {
			continue
		}
		slices.Sort(cols)
		if sweep == "concurrency" {
			b.WriteString("cycles/s (ratio to the naive lock) by concurrent goroutines\n\n| implementation |")
		} else {
			fmt.Fprintf(&b, "\ncycles/s (ratio to the naive lock) by stored records, at %d goroutines\n\n| implementation |", at)
		}
		for _, c := range cols {
			b.WriteString(" " + count(c) + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
		for _, im := range impls {
			b.WriteString("| " + im + " |")
			for _, c := range cols {
				if r, ok := cells[im][c]; ok {
					fmt.Fprintf(&b, " %s (%.2f×) |", count(int64(math.Round(r.perSecond()/100)*100)), r.xNaive)
				} else {
					b.WriteString(" |")
				}
			}
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// memoryTable is memory.md: bytes per stored record of each backend, from
// its largest fill: what the backend grew by over the records it added.
func memoryTable(mems []memRow) []byte {
	var b bytes.Buffer
	b.WriteString("| backend | stored records | bytes per record | measured by |\n|---|---:|---:|---|\n")
	var order []string
	last := map[string]memRow{}
	for _, m := range mems {
		if _, ok := last[m.backend]; !ok {
			order = append(order, m.backend)
		}
		if m.added >= last[m.backend].added {
			last[m.backend] = m
		}
	}
	for _, name := range order {
		m := last[name]
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s |\n", name, count(m.records), float64(m.bytes)/float64(m.added), m.measuredBy)
	}
	return b.Bytes()
}

// chart is a line chart with a log10 y axis.
type chart struct {
	title, xLabel, yLabel string
	ticks                 []tick // x positions, in data units, with their labels
	lines                 []line
}

type tick struct {
	x     float64
	label string
}

type line struct {
	name   string
	points []point
}

type point struct{ x, y float64 }

// The chart's geometry, in SVG user units.
const (
	width, height           = 820, 460
	left, right, top, below = 80, 200, 40, 60
)

// colours pairs each naive lock with idem on the same client: red for
// go-redis, blue for rueidis. The naive locks are drawn dashed.
var colours = map[string]string{
	"naive": "#d62728", "idem-redis-goredis": "#d62728",
	"naive-rueidis": "#1f77b4", "idem-redis-rueidis": "#1f77b4",
	"redislock": "#7f7f7f", "idem-memory": "#2ca02c", "idem-postgres": "#9467bd",
}

// palette colours the lines colours does not name, in order.
var palette = []string{"#222222", "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#17becf"}

// svg draws the chart. Points with y <= 0 are left out (no log).
func (c chart) svg() []byte {
	var b bytes.Buffer
	esc := func(s string) string {
		var e bytes.Buffer
		xml.EscapeText(&e, []byte(s))
		return e.String()
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, t := range c.ticks {
		xmin, xmax = min(xmin, t.x), max(xmax, t.x)
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, l := range c.lines {
		for _, p := range l.points {
			if p.y > 0 {
				ymin, ymax = min(ymin, p.y), max(ymax, p.y)
			}
		}
	}
	if math.IsInf(xmin, 0) || xmin == xmax {
		xmin, xmax = xmin-1, xmin+1
	}
	if math.IsInf(ymin, 0) {
		ymin, ymax = 1, 10
	}
	lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if lo == hi {
		hi++
	}
	pw, ph := float64(width-left-right), float64(height-top-below)
	px := func(x float64) float64 { return left + (x-xmin)/(xmax-xmin)*pw }
	py := func(y float64) float64 { return top + ph - (math.Log10(y)-lo)/(hi-lo)*ph }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(c.title))
	// y grid at 1, 2 and 5 of every decade; labels at 1 and 5, and at 2
	// when the axis spans two decades or less.
	for d := lo; d <= hi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > hi+1e-9 {
				break
			}
			y := py(v)
			stroke := "#e4e4e4"
			if m == 1 {
				stroke = "#c8c8c8"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, y, left+pw, y, stroke)
			if m != 2 || hi-lo <= 2 {
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, count(int64(v)))
			}
		}
	}
	for _, t := range c.ticks {
		x := px(t.x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x, top, x, top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+18, esc(t.label))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", left+pw/2, height-16, esc(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, esc(c.yLabel))
	for i, l := range c.lines {
		colour, ok := colours[l.name]
		if !ok {
			colour = palette[i%len(palette)]
		}
		dash := ""
		if strings.HasPrefix(l.name, "naive") {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts bytes.Buffer
		for _, p := range l.points {
			if p.y > 0 {
				fmt.Fprintf(&pts, "%.1f,%.1f ", px(p.x), py(p.y))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`+"\n",
			colour, dash, bytes.TrimSpace(pts.Bytes()), esc(l.name))
		for _, p := range l.points {
			if p.y > 0 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p.x), py(p.y), colour)
			}
		}
		ly := top + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", left+pw+14, ly, left+pw+38, ly, colour, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", left+pw+44, ly+4, esc(l.name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
