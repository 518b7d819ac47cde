package idemhttp

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// A body is allocated as its bytes arrive, never on the client's word: a
// claimed gigabyte that never comes costs firstBodyBuffer at most.
func TestReadAllGrowsWithWhatArrives(t *testing.T) {
	body, err := readAll(bytes.NewReader([]byte("0123456789")), 1<<30)
	if err != nil || string(body) != "0123456789" {
		t.Fatalf("readAll = %q, %v", body, err)
	}
	if cap(body) > firstBodyBuffer {
		t.Fatalf("a body announced as 1 GiB that sent 10 bytes got a %d-byte buffer; want at most %d", cap(body), firstBodyBuffer)
	}
	for _, n := range []int{0, 1, 511, 512, firstBodyBuffer - 1, firstBodyBuffer, firstBodyBuffer + 1, 3 << 20} {
		want := bytes.Repeat([]byte{'x'}, n)
		for _, announced := range []int64{int64(n), -1} {
			// OneByteReader: bytes trickle in, as from a slow client.
			got, err := readAll(iotest.OneByteReader(bytes.NewReader(want)), announced)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("n=%d announced=%d: %d bytes, %v", n, announced, len(got), err)
			}
			if cap(got) > max(2*n, firstBodyBuffer) {
				t.Errorf("n=%d announced=%d: buffer of %d bytes; want at most twice what arrived", n, announced, cap(got))
			}
			if announced >= 0 && cap(got) > n+1 {
				t.Errorf("n=%d: buffer of %d bytes grew past the announced length", n, cap(got))
			}
		}
	}
	if _, err := readAll(iotest.ErrReader(io.ErrUnexpectedEOF), 10); err != io.ErrUnexpectedEOF {
		t.Fatalf("readAll of a failing reader = %v", err)
	}
}
