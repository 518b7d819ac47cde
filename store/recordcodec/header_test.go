package recordcodec_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/store/recordcodec"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []http.Header{
		nil,
		{"Content-Type": {"application/json"}},
		{"X-Multi": {"a", "", "b\x00c"}, "Location": {"/orders/1"}, "Empty": {}},
	} {
		b := recordcodec.AppendHeader(nil, h)
		got, err := recordcodec.ParseHeader(b)
		if err != nil {
			t.Fatalf("ParseHeader(AppendHeader(%v)): %v", h, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(h) && !(len(h) == 0 && len(got) == 0) {
			t.Fatalf("round trip of %v gave %v", h, got)
		}
	}
	if !bytes.Equal(recordcodec.AppendHeader(nil, http.Header{"B": {"2"}, "A": {"1"}}), recordcodec.AppendHeader(nil, http.Header{"A": {"1"}, "B": {"2"}})) {
		t.Fatal("the encoding depends on map order")
	}
	for _, bad := range [][]byte{{0x05}, {0x01, 0x09, 'a'}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, append(recordcodec.AppendHeader(nil, http.Header{"A": {"1"}}), 0)} {
		if _, err := recordcodec.ParseHeader(bad); err == nil {
			t.Errorf("ParseHeader(%x) accepted corrupt bytes", bad)
		}
	}
}

// FuzzParseHeader: stored header bytes from a store never panic the
// decoder, and whatever decodes encodes back to the same bytes.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{})
	f.Add(recordcodec.AppendHeader(nil, http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}}))
	f.Add([]byte{0x01, 0x01, 'A', 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := recordcodec.ParseHeader(b)
		if err != nil {
			return
		}
		if again, err := recordcodec.ParseHeader(recordcodec.AppendHeader(nil, h)); err != nil || fmt.Sprint(again) != fmt.Sprint(h) {
			t.Fatalf("decoded %v does not survive a round trip: %v %v", h, again, err)
		}
	})
}
