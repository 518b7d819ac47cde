package gateway

import (
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// An UNKNOWN record has no end in time: the admin view says it is kept
// until settled rather than a TTL that reads as "expires now" (stores
// report TTL 0 for it), while a PROCESSING or COMPLETED record keeps its
// TTL.
func TestRecordViewOfUnknownSaysUntilSettled(t *testing.T) {
	for _, tc := range []struct {
		rec          store.Record
		ttl          int64
		untilSettled bool
	}{
		{store.Record{State: store.StateUnknown, Reason: "timeout"}, 0, true},
		{store.Record{State: store.StateProcessing, TTL: 30 * time.Second}, 30000, false},
		{store.Record{State: store.StateCompleted, TTL: time.Hour, Result: &store.Result{Status: 200}}, 3600000, false},
	} {
		if v := ViewRecord(tc.rec); v.TTLMillis != tc.ttl || v.UntilSettled != tc.untilSettled {
			t.Errorf("ViewRecord(%v) ttl_ms %d, until_settled %v; want %d, %v", tc.rec.State, v.TTLMillis, v.UntilSettled, tc.ttl, tc.untilSettled)
		}
	}
}
