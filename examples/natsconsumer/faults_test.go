package natsconsumer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Times of the faults. AckWait is short so that JetStream redelivers while
// a first delivery still runs; the idem lease is longer than AckWait (and
// renewed) so that only a dead owner loses it.
const (
	ackWait    = time.Second
	lease      = 3 * time.Second
	retryDelay = 200 * time.Millisecond
	dupWindow  = 200 * time.Millisecond // the stream's duplicate window
	messages   = 5                      // business messages per fault
)

// tally collects the deliveries of one fault, from every consumer of it,
// in this process and in the consumer processes it starts.
type tally struct {
	mu         sync.Mutex
	deliveries []Delivery
	acked      map[uint64]bool          // stream sequences whose ack the server confirmed
	inflight   map[string]chan struct{} // closed when a delivery of the key met it in flight
	closed     map[string]bool
	fromLedger int // keys whose unknown outcome Reconcile settled from the ledger
	killed     int // charges made by consumer processes that were then SIGKILLed
	notify     chan struct{}
}

func newTally() *tally {
	return &tally{acked: map[uint64]bool{}, inflight: map[string]chan struct{}{}, closed: map[string]bool{}, notify: make(chan struct{}, 1)}
}

func (t *tally) add(d Delivery) {
	t.mu.Lock()
	t.deliveries = append(t.deliveries, d)
	if d.Acked && d.Seq != 0 {
		t.acked[d.Seq] = true
	}
	if d.Outcome == InFlight {
		if c := t.inflightLocked(d.Key); !t.closed[d.Key] {
			close(c)
			t.closed[d.Key] = true
		}
	}
	t.mu.Unlock()
	t.poke()
}

// inflightLocked is the channel closed when a delivery of key met it in flight.
func (t *tally) inflightLocked(key string) chan struct{} {
	c, ok := t.inflight[key]
	if !ok {
		c = make(chan struct{})
		t.inflight[key] = c
	}
	return c
}

func (t *tally) reconciled(_ string, found bool) {
	if found {
		t.mu.Lock()
		t.fromLedger++
		t.mu.Unlock()
	}
}

func (t *tally) poke() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// waitInFlight blocks until a delivery of key was refused as in flight:
// the hook that holds a first delivery until JetStream redelivered it.
func (t *tally) waitInFlight(ctx context.Context, key string) error {
	t.mu.Lock()
	c := t.inflightLocked(key)
	t.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no redelivery of %s met it in flight: %w", key, context.Cause(ctx))
	}
}

// waitAcked blocks until n stream sequences were acked.
func (t *tally) waitAcked(ctx context.Context, n int) error {
	for {
		t.mu.Lock()
		got := len(t.acked)
		t.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-t.notify:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d messages acked: %w", got, n, ctx.Err())
		}
	}
}

// row is one line of the fault table.
type row struct {
	fault, impl                                 string
	messages, published, deliveries             int
	effects, double, lost                       int
	inflight, replayed, fromLedger, unackedLeft int
	killed                                      int
}

// fault is one run: a stream, a durable consumer on it, and the tally.
type fault struct {
	t       *testing.T
	ctx     context.Context
	js      jetstream.JetStream
	cfg     consumerConfig
	subject string
	tally   *tally
	keys    []string // the business keys, one per message
	pubs    int      // messages the stream stored
}

func newFault(t *testing.T, ctx context.Context, s site, nc *nats.Conn) *fault {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := unique("NATSCONSUMER_")
	f := &fault{t: t, ctx: ctx, js: js, subject: strings.ToLower(stream) + ".orders", tally: newTally(),
		cfg: consumerConfig{site: s, tenant: unique("t"), stream: stream, durable: unique("charger"),
			lease: lease, retryDelay: retryDelay}}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{f.subject},
		Duplicates: dupWindow, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, stream); err != nil { // its consumers go with it
			t.Errorf("delete stream %s: %v", stream, err)
		}
	})
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: f.cfg.durable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, FilterSubject: f.subject}); err != nil {
		t.Fatal(err)
	}
	for i := range messages {
		f.keys = append(f.keys, "order-"+strconv.Itoa(i))
	}
	return f
}

// publish publishes the order of keys[i] with msgID; it reports whether
// the stream stored it (false: deduplicated within the window).
func (f *fault) publish(i int, msgID string) bool {
	f.t.Helper()
	body, _ := json.Marshal(Order{ID: strconv.Itoa(i), Amount: int64(100 + i)})
	ack, err := f.js.Publish(f.ctx, f.subject, body, jetstream.WithMsgID(msgID))
	if err != nil {
		f.t.Fatal(err)
	}
	if !ack.Duplicate {
		f.pubs++
	}
	return !ack.Duplicate
}

func (f *fault) start(tweak func(*Config, *Ledger)) *running {
	f.t.Helper()
	r, err := startConsumer(f.ctx, f.cfg, func(c *Config, l *Ledger) {
		c.OnDelivery = f.tally.add
		l.onReconcile = f.tally.reconciled
		if tweak != nil {
			tweak(c, l)
		}
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// holdUntilRedelivered makes the first delivery of every key wait, after
// it acquired the key and before it charges, until JetStream redelivered
// the message (AckWait passed; no in-progress acks) and idem refused that
// delivery as in flight.
func (f *fault) holdUntilRedelivered(c *Config, _ *Ledger) {
	c.beforeCharge = func(ctx context.Context, key string) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return f.tally.waitInFlight(ctx, key)
	}
}

// finish waits for every stored message to be acked, and counts.
func (f *fault) finish(name string, expectKeys []string) row {
	f.t.Helper()
	if err := f.tally.waitAcked(f.ctx, f.pubs); err != nil {
		f.t.Fatal(err)
	}
	// Every message acked: nothing pending or unacknowledged is left.
	cons, err := f.js.Consumer(f.ctx, f.cfg.stream, f.cfg.durable)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := cons.Info(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	pool, err := pgxpool.New(f.ctx, databaseURL())
	if err != nil {
		f.t.Fatal(err)
	}
	defer pool.Close()
	ledger, err := OpenLedger(f.ctx, pool, f.cfg.schema)
	if err != nil {
		f.t.Fatal(err)
	}
	charges, err := ledger.Charges(f.ctx, f.cfg.tenant)
	if err != nil {
		f.t.Fatal(err)
	}
	r := row{fault: name, messages: len(expectKeys), published: f.pubs, unackedLeft: int(info.NumPending) + info.NumAckPending}
	for _, k := range expectKeys {
		switch n := charges[k]; {
		case n == 0:
			r.lost++
		case n > 1:
			r.double++
		}
	}
	for _, n := range charges {
		r.effects += n
	}
	f.tally.mu.Lock()
	defer f.tally.mu.Unlock()
	r.deliveries = len(f.tally.deliveries)
	r.fromLedger = f.tally.fromLedger
	r.killed = f.tally.killed
	for _, d := range f.tally.deliveries {
		switch d.Outcome {
		case InFlight:
			r.inflight++
		case Replayed:
			r.replayed++
		case Found:
			r.fromLedger++
		case Rejected:
			f.t.Errorf("delivery of %s rejected: %v", d.Key, d.Err)
		}
	}
	if len(charges) > len(expectKeys) {
		f.t.Errorf("charges for keys %v; want only %v", charges, expectKeys)
	}
	return r
}

// TestFaults runs every fault against a consumer on idem (Redis) with the
// PostgreSQL guardrail, counts the charges per message, and prints the
// table of docs/consumers.md.
func TestFaults(t *testing.T) {
	s := newSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nc, err := nats.Connect(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	var rows []row
	for _, impl := range []string{"idem-redis+pg", "idem-redis"} {
		t.Run(impl, func(t *testing.T) { rows = append(rows, runFaults(t, ctx, s, nc, impl)...) })
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\timplementation\tmessages\tpublished\tdeliveries\teffects\tdouble effects\tlost messages\tin flight\treplayed\tkilled after charge\tfrom ledger\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.fault, r.impl, r.messages, r.published,
			r.deliveries, r.effects, r.double, r.lost, r.inflight, r.replayed, r.killed, r.fromLedger)
	}
	tw.Flush()
	t.Logf("%d messages per fault:\n%s", messages, b.String())
	if path := os.Getenv("NATSCONSUMER_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// runFaults runs every fault on impl: idem-redis+pg (the consumer as
// shipped: one effect per message in every case), or idem-redis (the
// baseline without the guardrail: a consumer killed after its charge has
// the message charged again).
func runFaults(t *testing.T, ctx context.Context, s site, nc *nats.Conn, impl string) []row {
	guarded := impl == "idem-redis+pg"
	var rows []row
	run := func(name string, fn func(t *testing.T, f *fault) row) {
		t.Run(name, func(t *testing.T) {
			f := newFault(t, ctx, s, nc)
			f.cfg.unguarded = !guarded
			r := fn(t, f)
			r.impl = impl
			rows = append(rows, r)
			if r.lost != 0 || r.unackedLeft != 0 {
				t.Errorf("%d lost, %d not acked; want every message charged and acked", r.lost, r.unackedLeft)
			}
			if !guarded && name == "sigkill-after-charge" {
				if r.double == 0 {
					t.Errorf("no double effect without the guardrail after a SIGKILL after the charge: the fault did not happen")
				}
				return
			}
			if r.double != 0 || r.effects != r.messages {
				t.Errorf("%d effects for %d messages, %d double; want one effect each", r.effects, r.messages, r.double)
			}
		})
	}

	run("redelivery-after-ackwait", func(t *testing.T, f *fault) row {
		c := f.start(f.holdUntilRedelivered)
		defer c.close()
		for i, k := range f.keys {
			f.publish(i, k)
		}
		r := f.finish("redelivery-after-ackwait", f.keys)
		if r.inflight < len(f.keys) {
			t.Errorf("%d deliveries refused in flight; want at least one per message (%d)", r.inflight, len(f.keys))
		}
		return r
	})

	run("two-consumers-one-durable", func(t *testing.T, f *fault) row {
		var handled [2]atomic.Int32 // deliveries each consumer handled
		for i := range handled {
			c := f.start(func(c *Config, l *Ledger) {
				f.holdUntilRedelivered(c, l)
				c.OnDelivery = func(d Delivery) { handled[i].Add(1); f.tally.add(d) }
			})
			defer c.close()
		}
		for i, k := range f.keys {
			f.publish(i, k)
		}
		r := f.finish("two-consumers-one-durable", f.keys)
		// Which consumer JetStream picks is its choice: reported, not asserted.
		t.Logf("deliveries handled: consumer A %d, consumer B %d", handled[0].Load(), handled[1].Load())
		if r.inflight < len(f.keys) {
			t.Errorf("%d deliveries refused in flight; want at least one per message (%d)", r.inflight, len(f.keys))
		}
		return r
	})

	run("sigkill-after-charge", func(t *testing.T, f *fault) row {
		// Two consumer processes, each SIGKILLed once it made a charge and
		// before it completed the key or acked; every charge it makes
		// waits for the kill. The second gets the first one's messages
		// redelivered, with their keys PROCESSING under a dead owner, and
		// new messages to charge. Then a consumer here drains the rest.
		half := len(f.keys) / 2
		for i, k := range f.keys[:half] {
			f.publish(i, k)
		}
		f.killConsumerProcess()
		for i, k := range f.keys[half:] {
			f.publish(half+i, k)
		}
		f.killConsumerProcess()
		c := f.start(nil)
		defer c.close()
		r := f.finish("sigkill-after-charge", f.keys)
		if r.killed < 2 {
			t.Errorf("%d charges made before a SIGKILL; want at least one per process", r.killed)
		}
		if guarded && r.fromLedger < r.killed {
			t.Errorf("%d keys settled from the ledger; want at least the %d killed after their charge", r.fromLedger, r.killed)
		}
		return r
	})

	run("duplicate-publish-same-msg-id", func(t *testing.T, f *fault) row {
		c := f.start(nil)
		defer c.close()
		for i, k := range f.keys {
			f.publish(i, k)
		}
		if err := f.tally.waitAcked(ctx, f.pubs); err != nil {
			t.Fatal(err)
		}
		// The same messages again, after the duplicate window: the
		// publisher's retry the broker no longer deduplicates.
		tick := time.NewTicker(dupWindow / 4)
		defer tick.Stop()
		for i, k := range f.keys {
			for !f.publish(i, k) {
				<-tick.C // the broker's window is a server clock: wait for it to pass
			}
		}
		r := f.finish("duplicate-publish-same-msg-id", f.keys)
		if r.published != 2*len(f.keys) || r.replayed < len(f.keys) {
			t.Errorf("%d stored, %d replayed; want every message stored twice and its copy replayed", r.published, r.replayed)
		}
		return r
	})

	run("duplicate-publish-new-msg-id", func(t *testing.T, f *fault) row {
		f.cfg.orderKey = true
		c := f.start(nil)
		defer c.close()
		var keys []string
		for i := range f.keys {
			f.publish(i, fmt.Sprintf("pub-a-%d", i)) // one order, two message ids
			f.publish(i, fmt.Sprintf("pub-b-%d", i))
			keys = append(keys, "order/"+strconv.Itoa(i))
		}
		r := f.finish("duplicate-publish-new-msg-id", keys)
		if r.published != 2*len(f.keys) {
			t.Errorf("%d stored; want every order stored twice", r.published)
		}
		return r
	})

	return rows
}

// The consumer process of the SIGKILL fault: the test binary run again
// with childEnv set, its configuration in the environment. Its charges
// wait after their commit, before Complete and the ack, and it writes one
// line per event on stdout: "charged KEY" or "delivery SEQ KEY OUTCOME ACKED".
const childEnv = "NATSCONSUMER_CHILD"

// killConsumerProcess starts a consumer process, waits for its first
// charge, and SIGKILLs it.
func (f *fault) killConsumerProcess() {
	t := f.t
	t.Helper()
	c := f.cfg
	cmd := exec.CommandContext(f.ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "NC_SCHEMA="+c.schema, "NC_PREFIX="+c.prefix,
		"NC_TENANT="+c.tenant, "NC_STREAM="+c.stream, "NC_DURABLE="+c.durable, "NC_LEASE="+c.lease.String(),
		"NC_RETRY="+c.retryDelay.String(), "NC_UNGUARDED="+strconv.FormatBool(c.unguarded))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	charged := make(chan string, 64)
	read := make(chan struct{})
	go func() {
		defer close(read)
		f.readChild(out, charged)
	}()
	select {
	case key := <-charged:
		t.Logf("consumer process %d charged %s: SIGKILL", cmd.Process.Pid, key)
	case <-read:
		cmd.Wait()
		t.Fatalf("consumer process ended before it charged: %s", stderr.String())
	case <-f.ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("consumer process charged nothing: %s", stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-read
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("consumer process: %v; want killed (%s)", err, stderr.String())
	}
}

func (f *fault) readChild(out io.Reader, charged chan<- string) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 2 && fields[0] == "charged":
			f.tally.mu.Lock()
			f.tally.killed++
			f.tally.mu.Unlock()
			select {
			case charged <- fields[1]:
			default: // the process is being killed already
			}
		case len(fields) == 5 && fields[0] == "delivery":
			seq, _ := strconv.ParseUint(fields[1], 10, 64)
			f.tally.add(Delivery{Seq: seq, Key: fields[2], Outcome: Outcome(fields[3]), Acked: fields[4] == "true"})
		case len(fields) == 3 && fields[0] == "reconciled":
			f.tally.reconciled(fields[1], fields[2] == "true")
		}
	}
}

// runChild is the consumer process: it consumes until it is killed.
func runChild() int {
	lease, err1 := time.ParseDuration(os.Getenv("NC_LEASE"))
	retry, err2 := time.ParseDuration(os.Getenv("NC_RETRY"))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := consumerConfig{site: site{schema: os.Getenv("NC_SCHEMA"), prefix: os.Getenv("NC_PREFIX")},
		tenant: os.Getenv("NC_TENANT"), stream: os.Getenv("NC_STREAM"), durable: os.Getenv("NC_DURABLE"),
		lease: lease, retryDelay: retry, unguarded: os.Getenv("NC_UNGUARDED") == "true"}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := startConsumer(ctx, cfg, func(c *Config, l *Ledger) {
		c.OnDelivery = func(d Delivery) { say("delivery %d %s %s %t", d.Seq, d.Key, d.Outcome, d.Acked) }
		l.onReconcile = func(key string, found bool) { say("reconciled %s %t", key, found) }
		c.afterCharge = func(key string) {
			say("charged %s", key)
			<-ctx.Done() // committed, not completed, not acked: wait for SIGKILL
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "consumer process: not killed within a minute")
	return 3
}
