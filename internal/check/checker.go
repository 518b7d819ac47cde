package check

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// History is what one run recorded.
type History struct {
	Ops     []Op
	Given   []Given
	Effects []Effect
	// External are operations on the store the model does not see (a
	// gateway's admin API); the invariants count their deletes.
	External []Op
	// Seen are the breaches the harness saw during the run (Recorder.saw).
	Seen []Violation `json:",omitempty"`
	// Config is the configuration the run drew (the product check's
	// config file, with its environment), written beside the history.
	Config string `json:",omitempty"`
	// Life, when set, is how long the record of a key lives after its
	// request began (the longer of its retention and key retention):
	// a key may run again after that. Nil: never within a run.
	Life map[string]int64 `json:",omitempty"`
}

// Verdict is what the checker found in one history.
type Verdict struct {
	// Linearizable is porcupine's answer: Ok, Illegal, or Unknown when
	// it ran out of time on some key (and found no key Illegal).
	Linearizable porcupine.CheckResult
	// Inconclusive counts the keys porcupine ran out of time on.
	Inconclusive int
	Violations   []Violation
	info         porcupine.LinearizationInfo // of the first key found Illegal
	model        porcupine.Model
}

// Failed reports whether the history breaks the model or an invariant.
func (v Verdict) Failed() bool { return len(v.Violations) > 0 }

// Check checks h: linearizability against the model of a key (with
// porcupine, each key within timeout), then the invariants the model does
// not state by itself: the effects, the fences and the results given.
func Check(h History, o Options, timeout time.Duration) Verdict {
	m := Model(o)
	ops := make([]porcupine.Operation, len(h.Ops))
	for i, op := range h.Ops {
		ops[i] = porcupine.Operation{ClientId: op.Client, Input: op.In, Call: op.Call, Output: op.Out, Return: op.Return}
	}
	v := Verdict{Linearizable: porcupine.Ok, model: m}
	var illegal []string
	for _, part := range m.Partition(ops) {
		res, info := porcupine.CheckOperationsVerbose(m, part, timeout)
		switch res {
		case porcupine.Illegal:
			if len(illegal) == 0 {
				v.info = info
			}
			illegal = append(illegal, part[0].Input.(Input).Key)
			v.Linearizable = porcupine.Illegal
		case porcupine.Unknown:
			v.Inconclusive++
			if v.Linearizable == porcupine.Ok {
				v.Linearizable = porcupine.Unknown
			}
		}
	}
	for _, key := range illegal {
		v.Violations = append(v.Violations, Violation{"linearizability", key,
			"no order of the store's state machine explains the key's history (visualization.html shows the first such key)"})
	}
	dels := deletes(append(slices.Clone(h.Ops), h.External...))
	v.Violations = append(v.Violations, h.Seen...)
	v.Violations = append(v.Violations, checkEffects(h.Effects, h.Given, dels, h.Life)...)
	v.Violations = append(v.Violations, checkFences(h.Ops)...)
	v.Violations = append(v.Violations, checkGiven(h.Given, h.Effects, dels, h.Life)...)
	return v
}

// Write puts what a reader needs to see a failed run in dir: the seed and
// configuration (seed.txt), the violations (violations.txt), the history
// (history.json) and porcupine's visualization (visualization.html), and
// VIOLATION, the marker scripts/mutate.sh looks for.
func (v Verdict) Write(dir, config string, seed uint64, h History) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, x := range v.Violations {
		fmt.Fprintln(&b, x)
	}
	hist, err := MarshalHistory(h)
	if err != nil {
		return err
	}
	files := map[string]string{
		"seed.txt": fmt.Sprintf("config %s\nseed %d\nrerun: IDEM_CHECK=short IDEM_CHECK_CONFIGS=%s IDEM_CHECK_SEED=%d go test -count=1 -run TestCampaign ./internal/check/\n",
			config, seed, config, seed),
		"violations.txt": b.String(),
		"history.json":   string(hist),
		"VIOLATION":      config + "\n",
	}
	if h.Config != "" {
		files["config.txt"] = h.Config
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if v.Linearizable != porcupine.Illegal {
		return nil
	}
	return porcupine.VisualizePath(v.model, v.info, filepath.Join(dir, "visualization.html"))
}
