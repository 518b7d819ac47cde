package check

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind is the store operation an Op records.
type Kind uint8

// The operations of store.Store on one key (ListUnknown, which reads
// many keys, is not recorded).
const (
	KAcquire Kind = iota + 1
	KComplete
	KExtend
	KRelease
	KMarkUnknown
	KClaim
	KResolve
	KGet
	KDelete
)

var kindNames = [...]string{"?", "acquire", "complete", "extend", "release", "mark_unknown", "claim", "resolve", "get", "delete"}

// String names the kind as the Store method it records.
func (k Kind) String() string { return kindNames[min(int(k), len(kindNames)-1)] }

// MarshalText writes the name, for the JSON history.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if i > 0 && n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("check: unknown operation %q", b)
}

// Input is what a client asked of the store: the method and its parameters.
type Input struct {
	Kind     Kind
	Key      string // tenant and key, the partition of the history
	Owner    string `json:",omitempty"` // the lease's owner (acquire and the owner's calls), or the claim's (claim)
	Fence    int64  `json:",omitempty"` // complete, extend, release, mark unknown, resolve, delete (0: any record)
	FP       string `json:",omitempty"` // acquire
	TakeOver bool   `json:",omitempty"` // acquire
	// Result is the encoded result of a complete, or of a resolve when
	// HasResult (a resolve without one says "not executed").
	Result    string `json:",omitempty"`
	HasResult bool   `json:",omitempty"`
	Reason    string `json:",omitempty"` // mark unknown
	Claim     string `json:",omitempty"` // resolve: the caller's claim, "" for an operator
	// Lease is the lease (acquire, extend) or claim (claim) asked for, in
	// ns, for the bound on when it may end; zero turns that bound off
	// (a configuration whose store clock jumps).
	Lease int64 `json:",omitempty"`
	// Call and Return repeat the operation's times (ns since the run
	// began), for the model's time bounds; Return is math.MaxInt64 when
	// the client never learned the outcome.
	Call, Return int64
}

// Output is what the client learned.
type Output struct {
	// Info: the call failed in a way that leaves its outcome unknown (a
	// timeout, a cut connection, a server error): it may have taken
	// effect, at any time after its call.
	Info bool `json:",omitempty"`
	// Fail: the call was refused before it could take effect (a bounded
	// store that is full).
	Fail bool `json:",omitempty"`
	// Err names a semantic refusal: "lost" (ErrLeaseLost), "notfound",
	// "notunknown", "stale" (ErrStaleFence); "" when it succeeded.
	Err string `json:",omitempty"`
	// Acquired, Fence and Took: an acquisition, its fence, and the fence
	// of the attempt it took over (0: none).
	Acquired bool  `json:",omitempty"`
	Fence    int64 `json:",omitempty"`
	Took     int64 `json:",omitempty"`
	// Rec is the record an acquire (not acquired), get or claim returned.
	Rec     *View  `json:",omitempty"`
	Claimed bool   `json:",omitempty"`
	Existed bool   `json:",omitempty"` // delete
	Detail  string `json:",omitempty"` // the error text of Info and Fail, for the reader
}

// View is the part of a record the model predicts.
type View struct {
	State  byte // 'P', 'C', 'U'
	Owner  string
	Fence  int64
	FP     string
	Result string `json:",omitempty"` // COMPLETED
	Reason string `json:",omitempty"` // UNKNOWN
}

func (v View) String() string {
	s := fmt.Sprintf("%c(%s f%d", v.State, short(v.Owner), v.Fence)
	switch v.State {
	case 'C':
		s += " " + short(v.Result)
	case 'U':
		s += " " + v.Reason
	}
	return s + ")"
}

// Op is one recorded operation.
type Op struct {
	Client       int // a lane for the visualization: the lowest free one at the call
	Call, Return int64
	In           Input
	Out          Output
}

// Given is a result an engine handed to its client: the work's own output
// after a successful Complete, or a replay.
type Given struct {
	Key          string
	Body         string
	Full         string // the encoded Result, when the client saw all of it (Begin); "" from Do
	Replay       bool
	Call, Return int64
}

// Recorder collects the operations of one run from every goroutine. The
// times are nanoseconds on the monotonic clock since the run began.
type Recorder struct {
	start time.Time

	mu    sync.Mutex
	ops   []Op        // guarded by mu
	ext   []Op        // guarded by mu: operations not made through a recorded store
	given []Given     // guarded by mu
	lanes []bool      // guarded by mu: lanes in use
	seen  []Violation // guarded by mu
}

// saw records breaches the harness saw as they happened: a request that
// reached the upstream unprotected, a refusal that did not come.
func (r *Recorder) saw(v ...Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, v...)
}

// Seen returns what saw recorded.
func (r *Recorder) Seen() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// NewRecorder starts a recorder; its clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now returns the recorder's clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// begin takes a lane for an operation starting now.
func (r *Recorder) begin() (lane int, call int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lane = slices.Index(r.lanes, false)
	if lane < 0 {
		lane = len(r.lanes)
		r.lanes = append(r.lanes, true)
	} else {
		r.lanes[lane] = true
	}
	return lane, r.Now()
}

// end records an operation begun with begin. An Info output returns at
// infinity: it may take effect at any later time.
func (r *Recorder) end(lane int, call int64, in Input, out Output) {
	r.finish(&r.ops, lane, call, in, out)
}

// external records an operation made on the store through something the
// recorder does not see (a gateway's admin API): the invariants use it,
// the model does not.
func (r *Recorder) external(lane int, call int64, in Input, out Output) {
	r.finish(&r.ext, lane, call, in, out)
}

func (r *Recorder) finish(to *[]Op, lane int, call int64, in Input, out Output) {
	ret := r.Now()
	if out.Info {
		ret = math.MaxInt64
	}
	in.Call, in.Return = call, ret
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lanes[lane] = false
	*to = append(*to, Op{Client: lane, Call: call, Return: ret, In: in, Out: out})
}

// Ops returns the operations recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// External returns the operations recorded with external.
func (r *Recorder) External() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ext)
}

// give records a result handed to a client.
func (r *Recorder) give(g Given) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.given = append(r.given, g)
}

// Given returns the results handed to clients so far.
func (r *Recorder) Given() []Given {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.given)
}

// EncodeResult is the one form of a result the history compares: status,
// header (names sorted, values in order) and body.
func EncodeResult(status int, h http.Header, body []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|", status)
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, v := range h[n] {
			fmt.Fprintf(&b, "%s=%s;", n, v)
		}
	}
	b.WriteString("|")
	b.Write(body)
	return b.String()
}

// short cuts a token for display.
func short(s string) string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

// MarshalHistory writes the operations, the results given and the
// effects as JSON.
func MarshalHistory(h History) ([]byte, error) { return json.MarshalIndent(h, "", " ") }
