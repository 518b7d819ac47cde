package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// row is one implementation at one point of a sweep.
type row struct {
	sweep       string // "concurrency" or "keys"
	impl        string
	concurrency int
	stored      int64
	cycles      int64
	seconds     float64
	xNaive      float64 // cycles/s over the naive lock's at the same point
}

func (r row) perSecond() float64 {
	if r.seconds <= 0 {
		return 0
	}
	return float64(r.cycles) / r.seconds
}

var rowHeader = []string{"sweep", "impl", "concurrency", "stored_keys", "cycles", "seconds", "cycles_per_s", "x_naive"}

func writeRows(path string, rows []row) error {
	recs := [][]string{rowHeader}
	for _, r := range rows {
		recs = append(recs, []string{r.sweep, r.impl, strconv.Itoa(r.concurrency), strconv.FormatInt(r.stored, 10),
			strconv.FormatInt(r.cycles, 10), strconv.FormatFloat(r.seconds, 'f', 3, 64),
			strconv.FormatFloat(r.perSecond(), 'f', 0, 64), strconv.FormatFloat(r.xNaive, 'f', 3, 64)})
	}
	return writeCSV(path, recs)
}

// readRows parses what writeRows wrote.
func readRows(r io.Reader) ([]row, error) {
	recs, err := readCSV(r, rowHeader)
	if err != nil {
		return nil, err
	}
	rows := make([]row, len(recs))
	for i, f := range recs {
		p := parser{line: i + 2}
		rows[i] = row{sweep: f[0], impl: f[1], concurrency: int(p.int(f[2], "concurrency")), stored: p.int(f[3], "stored_keys"),
			cycles: p.int(f[4], "cycles"), seconds: p.float(f[5], "seconds"), xNaive: p.float(f[7], "x_naive")}
		if p.err != nil {
			return nil, p.err
		}
		if rows[i].sweep != "concurrency" && rows[i].sweep != "keys" {
			return nil, fmt.Errorf("line %d: sweep %q is neither concurrency nor keys", i+2, f[0])
		}
		if rows[i].concurrency < 1 || rows[i].seconds <= 0 {
			return nil, fmt.Errorf("line %d: concurrency and seconds must be positive", i+2)
		}
	}
	return rows, nil
}

// memRow is the memory that a fill of one backend added.
type memRow struct {
	backend    string
	records    int64 // stored records after the fill
	added      int64 // records the fill added
	bytes      int64 // what the backend's size grew by
	measuredBy string
}

var memHeader = []string{"backend", "records", "added", "bytes", "bytes_per_record", "measured_by"}

func writeMemory(path string, mems []memRow) error {
	recs := [][]string{memHeader}
	for _, m := range mems {
		recs = append(recs, []string{m.backend, strconv.FormatInt(m.records, 10), strconv.FormatInt(m.added, 10),
			strconv.FormatInt(m.bytes, 10), strconv.FormatFloat(float64(m.bytes)/float64(m.added), 'f', 0, 64), m.measuredBy})
	}
	return writeCSV(path, recs)
}

func readMemory(r io.Reader) ([]memRow, error) {
	recs, err := readCSV(r, memHeader)
	if err != nil {
		return nil, err
	}
	mems := make([]memRow, len(recs))
	for i, f := range recs {
		p := parser{line: i + 2}
		mems[i] = memRow{backend: f[0], records: p.int(f[1], "records"), added: p.int(f[2], "added"), bytes: p.int(f[3], "bytes"), measuredBy: f[5]}
		if p.err != nil {
			return nil, p.err
		}
		if mems[i].added <= 0 {
			return nil, fmt.Errorf("line %d: added must be positive", i+2)
		}
	}
	return mems, nil
}

// parser keeps the first bad field of a CSV line.
type parser struct {
	line int
	err  error
}

func (p *parser) int(s, name string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("line %d: %s %q is not an integer", p.line, name, s)
	}
	return n
}

func (p *parser) float(s, name string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if (err != nil || math.IsNaN(f) || math.IsInf(f, 0)) && p.err == nil {
		p.err = fmt.Errorf("line %d: %s %q is not a number", p.line, name, s)
	}
	return f
}

func writeCSV(path string, recs [][]string) error {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.WriteAll(recs); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// readCSV reads records under the header want, without the header.
func readCSV(r io.Reader, want []string) ([][]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(want)
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || !slices.Equal(recs[0], want) {
		return nil, fmt.Errorf("the header is not %v", want)
	}
	return recs[1:], nil
}
