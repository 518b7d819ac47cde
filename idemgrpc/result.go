package idemgrpc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem"
)

// resultBuffer holds one call's encodings (the request to fingerprint it,
// the answer to store it); the store copies what it keeps
// (store.CompleteParams), so the buffer goes back to the pool after.
type resultBuffer struct{ b []byte }

var resultBuffers = sync.Pool{New: func() any { return &resultBuffer{b: make([]byte, 0, 512)} }}

// maxPooled keeps one huge message from pinning its buffer in the pool.
const maxPooled = 64 << 10

var deterministic = proto.MarshalOptions{Deterministic: true}

// fingerprint is the hex SHA-256 of the full method name and the
// request's deterministic protobuf encoding (map entries sorted). Two
// requests that decode to the same message have the same fingerprint
// within one build; unknown fields count, as they are part of what the
// client sent.
func fingerprint(method string, msg proto.Message) (string, error) {
	rb := resultBuffers.Get().(*resultBuffer)
	defer putBuffer(rb)
	b := append(rb.b[:0], method...)
	b = append(b, 0)
	b, err := deterministic.MarshalAppend(b, msg)
	if err != nil {
		return "", err
	}
	rb.b = b
	sum := sha256.Sum256(b)
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:]), nil
}

func putBuffer(rb *resultBuffer) {
	if cap(rb.b) <= maxPooled {
		resultBuffers.Put(rb)
	}
}

// A stored answer is an idem.Result whose Status is the gRPC code and
// whose Body is, for OK, the response's full message name, a newline and
// its protobuf encoding (the name finds the type to decode it into on a
// replay, in any process that links it), and for any other code the
// encoded google.rpc.Status, details included.

// encodeResult encodes the handler's answer into b.
func encodeResult(rb *resultBuffer, resp any, st *status.Status) (idem.Result, error) {
	if st.Code() != codes.OK {
		b, err := proto.MarshalOptions{}.MarshalAppend(rb.b[:0], st.Proto())
		rb.b = b
		return idem.Result{Status: int(st.Code()), Body: b}, err
	}
	msg, ok := resp.(proto.Message)
	if !ok || msg == nil {
		return idem.Result{}, fmt.Errorf("the response is a %T, not a protobuf message", resp)
	}
	b := append(rb.b[:0], msg.ProtoReflect().Descriptor().FullName()...)
	b = append(b, '\n')
	b, err := deterministic.MarshalAppend(b, msg)
	rb.b = b
	return idem.Result{Status: int(codes.OK), Body: b}, err
}

var errNotReplayable = errors.New("idemgrpc: stored result cannot be decoded")

// decodeResult turns a stored answer back into what the handler returned.
func decodeResult(res *idem.Result) (any, error) {
	if res.Status != int(codes.OK) {
		var sp spb.Status
		if err := proto.Unmarshal(res.Body, &sp); err != nil {
			return nil, notReplayable(err)
		}
		if sp.GetCode() != int32(res.Status) { // a status record holds its code twice: they agree
			return nil, notReplayable(fmt.Errorf("status %d recorded as %d", sp.GetCode(), res.Status))
		}
		return nil, status.FromProto(&sp).Err()
	}
	name, body, ok := bytes.Cut(res.Body, []byte{'\n'})
	if !ok {
		return nil, notReplayable(errors.New("no message name"))
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return nil, notReplayable(err)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(body, msg); err != nil {
		return nil, notReplayable(err)
	}
	return msg, nil
}

func notReplayable(err error) error {
	return errStatus(codes.Internal, ReasonNotReplayable,
		"idem: the call with this idempotency key ran, but its stored answer cannot be decoded here ("+
			errors.Join(errNotReplayable, err).Error()+"); it will not run again")
}

// durations keeps, per method, a moving average of how long its handler
// takes, for the RetryInfo of a call that finds its key in flight.
type durations struct {
	mu  sync.RWMutex
	avg map[string]time.Duration // guarded by mu
}

func newDurations() *durations { return &durations{avg: make(map[string]time.Duration)} }

// maxMethods bounds the map: methods are the server's, a fixed set, but a
// server with an UnknownServiceHandler sees any name.
const maxMethods = 1024

func (d *durations) add(method string, elapsed time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	avg, ok := d.avg[method]
	switch {
	case ok:
		d.avg[method] = avg + (elapsed-avg)/8
	case len(d.avg) < maxMethods:
		d.avg[method] = elapsed
	}
}

// noHistoryDelay is the RetryInfo of a call in flight for a method that
// has not finished a call yet: short, so that a quick call's duplicate is
// not kept waiting, and repeated by a retry policy until the first
// answer is there.
const noHistoryDelay = 100 * time.Millisecond

// estimate is when a call that found the key in flight should come back:
// the method's recent average duration, at least 1ms (the pushback
// trailer's resolution) and at most the rest of the lease (when it ends,
// the key is settled one way or another). Without history, noHistoryDelay.
// There is no floor of a second: grpc-go's retry policy waits exactly the
// pushback, and a 50ms call's duplicate would wait a second for it.
func (d *durations) estimate(method string, leaseLeft time.Duration) time.Duration {
	d.mu.RLock()
	avg, ok := d.avg[method]
	d.mu.RUnlock()
	if !ok {
		avg = noHistoryDelay
	}
	return max(time.Millisecond, min(avg.Round(time.Millisecond), leaseLeft))
}

// EncodeResult returns the stored form of an answer, resp or the status
// of err (an error that is no status is UNKNOWN), for an
// idem.Options.Reconcile or an operator's idem.Engine.Resolve that settles
// an UNKNOWN key of a gRPC method: the key's retries then get that answer
// replayed, as if the handler had given it.
func EncodeResult(resp proto.Message, err error) (idem.Result, error) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	res, eerr := encodeResult(&resultBuffer{}, resp, st)
	if eerr != nil {
		return idem.Result{}, fmt.Errorf("idemgrpc: EncodeResult: %w", eerr)
	}
	return res, nil
}
