// Package natsconsumer is an example: a NATS JetStream consumer that
// charges a (fake) payment provider exactly once per message, with idem on
// Redis and the PostgreSQL guardrail of store/pgstore.
//
// JetStream delivers at least once: a message whose ack did not arrive
// within AckWait is delivered again, also while the first delivery is still
// being handled, and a consumer process that dies after its side effect
// and before its ack gets its messages redelivered to the next one. The
// broker deduplicates publishes that carry the same Nats-Msg-Id within the
// stream's duplicate window, not consumption. The consumer's effect must be
// idempotent by a key of its own.
//
// # The key
//
// The key of a message is its Nats-Msg-Id header (MessageKey), which the
// publisher sets to the business key of the event ("order-42"), and, only
// when the header is absent, the stream sequence. The stream sequence names
// a stored copy, not the event: a publisher's retry after a lost publish
// ack, an outbox replayed, a republish after the duplicate window, each
// makes a new copy with a new sequence, so a key by sequence stops
// redeliveries only. The business key in Nats-Msg-Id stops those too, and
// it is the same key the broker deduplicates on within its window. A
// publisher that cannot keep the message ID across its retries needs a key
// from the payload: Config.Key (OrderKey here).
//
// # The flow
//
// Consumer.Handle runs Engine.Do with the key: a delivery of a key that
// another delivery is handling gets idem.ErrInFlight and is NAKed with a
// delay, one whose key is completed gets the stored charge back and is
// acked without charging. The work (Ledger.Charge) writes the charge and
// the guardrail's reservation of the key, with the lease's fence, in one
// PostgreSQL transaction. When a process dies after that commit and before
// its Complete, its lease ends and the key's outcome is unknown; the next
// delivery asks the ledger (Ledger.Reconcile, set as
// idem.Options.Reconcile), finds the committed charge, records it as the
// key's result and acks. A stalled owner that commits late is caught by
// the reservation itself: the second transaction's insert waits for it
// and fails with pgstore.ErrDuplicate.
//
// The charge table stands for a provider that shares the database: its
// effect commits in the guardrail's transaction. A provider across the
// network cannot join that transaction: forward the key to it as its
// idempotency key (idemclient), as docs/failure-model.md explains.
package natsconsumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
)

// Order is a message's payload: charge Amount for order ID.
type Order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// ErrBadMessage is returned, wrapped, for a message the consumer can never
// handle (no key, a payload that is not an Order): it is terminated.
var ErrBadMessage = errors.New("natsconsumer: bad message")

// MessageKey is the default key of a message: its Nats-Msg-Id header, or
// "<stream>/<stream sequence>" when the header is absent.
func MessageKey(msg jetstream.Msg) (string, error) {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id, nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("%w: no Nats-Msg-Id and no metadata: %w", ErrBadMessage, err)
	}
	return md.Stream + "/" + strconv.FormatUint(md.Sequence.Stream, 10), nil
}

// OrderKey keys a message by the order in its payload, for publishers
// that give one order several message IDs.
func OrderKey(msg jetstream.Msg) (string, error) {
	var o Order
	if err := json.Unmarshal(msg.Data(), &o); err != nil || o.ID == "" {
		return "", fmt.Errorf("%w: payload has no order id", ErrBadMessage)
	}
	return "order/" + o.ID, nil
}

// Outcome is what one delivery came to.
type Outcome string

// The outcomes of a delivery. Charged, Replayed and Found are acked,
// InFlight and Failed are NAKed with a delay, Rejected is terminated.
const (
	Charged  Outcome = "charged"   // this delivery charged
	Replayed Outcome = "replayed"  // the key was completed: its charge, replayed from idem
	Found    Outcome = "found"     // the work found the key's charge already committed in the ledger
	InFlight Outcome = "in-flight" // another delivery holds the key
	Failed   Outcome = "failed"    // the store or the ledger failed; nothing was charged by this delivery
	Rejected Outcome = "rejected"  // ErrBadMessage, or the key reused with another payload
)

// Delivery reports one handled delivery.
type Delivery struct {
	Seq     uint64 // stream sequence
	Key     string
	Outcome Outcome
	Charge  string // the key's charge id, when known
	Acked   bool   // the ack (or term) was confirmed by the server
	Err     error
}

// Config configures a Consumer.
type Config struct {
	// Engine runs the work once per key. Give it Ledger.Reconcile as
	// Options.Reconcile, so that a key whose owner died is settled from
	// the ledger.
	Engine *idem.Engine
	// Ledger charges and keeps the guardrail.
	Ledger *Ledger
	// Tenant scopes the keys (one per consumer group, say). Required.
	Tenant string
	// Key names a message's key. Nil means MessageKey.
	Key func(jetstream.Msg) (string, error)
	// RetryDelay is how long a NAKed delivery waits for its redelivery.
	// Zero means 1s.
	RetryDelay time.Duration
	// OnDelivery, when set, is called after every delivery's ack or NAK.
	OnDelivery func(Delivery)

	// beforeCharge and afterCharge are the tests' fault hooks, around the
	// work's transaction.
	beforeCharge func(ctx context.Context, key string) error
	afterCharge  func(key string)
}

// Consumer handles the deliveries of one JetStream consumer.
type Consumer struct{ c Config }

// New returns a consumer.
func New(c Config) (*Consumer, error) {
	if c.Engine == nil || c.Ledger == nil || c.Tenant == "" {
		return nil, errors.New("natsconsumer: New needs an Engine, a Ledger and a Tenant")
	}
	if c.Key == nil {
		c.Key = MessageKey
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
	return &Consumer{c: c}, nil
}

// Handle handles one delivery: charges once per key, then acks; NAKs with
// a delay what must be tried again; terminates a message that can never
// be handled.
func (c *Consumer) Handle(ctx context.Context, msg jetstream.Msg) Delivery {
	d := c.handle(ctx, msg)
	switch d.Outcome {
	case Charged, Replayed, Found:
		d.Err = errors.Join(d.Err, msg.DoubleAck(ctx))
		d.Acked = d.Err == nil
	case Rejected:
		d.Acked = msg.Term() == nil
	default:
		delay := c.c.RetryDelay
		var inflight *idem.InFlightError
		if errors.As(d.Err, &inflight) && inflight.RetryAfter < delay {
			delay = max(inflight.RetryAfter, 10*time.Millisecond)
		}
		d.Err = errors.Join(d.Err, msg.NakWithDelay(delay))
	}
	if c.c.OnDelivery != nil {
		c.c.OnDelivery(d)
	}
	return d
}

func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) Delivery {
	var d Delivery
	if md, err := msg.Metadata(); err == nil {
		d.Seq = md.Sequence.Stream
	}
	key, err := c.c.Key(msg)
	if err != nil {
		d.Outcome, d.Err = Rejected, err
		return d
	}
	d.Key = key
	var o Order
	if err := json.Unmarshal(msg.Data(), &o); err != nil || o.ID == "" || o.Amount <= 0 {
		d.Outcome, d.Err = Rejected, fmt.Errorf("%w: payload is not an order: %q", ErrBadMessage, msg.Data())
		return d
	}
	sum := sha256.Sum256(msg.Data())
	req := idem.Request{Tenant: c.c.Tenant, Key: key, Fingerprint: hex.EncodeToString(sum[:])}
	found := false
	out, replayed, err := c.c.Engine.Do(ctx, req, func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		if c.c.beforeCharge != nil {
			if err := c.c.beforeCharge(ctx, key); err != nil {
				return nil, err
			}
		}
		charge, dup, err := c.c.Ledger.Charge(ctx, c.c.Tenant, key, lease.Fence(), o)
		found = dup
		if err == nil && !dup && c.c.afterCharge != nil {
			c.c.afterCharge(key)
		}
		return []byte(charge), err
	})
	d.Charge, d.Err = string(out), err
	switch {
	case err == nil && replayed:
		d.Outcome = Replayed
	case err == nil && found:
		d.Outcome = Found
	case err == nil:
		d.Outcome = Charged
	case errors.Is(err, idem.ErrInFlight):
		d.Outcome = InFlight
	case errors.Is(err, idem.ErrMismatch), errors.Is(err, idem.ErrInvalidKey):
		d.Outcome = Rejected
	default:
		// The store or the ledger failed; or the charge committed and the
		// lease was lost before Complete (the next delivery finds it in
		// the ledger); or the key is UNKNOWN and waits for Reconcile.
		d.Outcome = Failed
	}
	return d
}
