package idemhttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/idemkit/idem/store"
)

// capture is the ResponseWriter a protected handler writes to. Everything
// goes on to the client as it is written (streaming and Flush keep
// working) and is also recorded for replay, whichever way the handler
// answers: WriteHeader, Write, WriteString (io.WriteString), an implicit
// 200, ReadFrom (io.Copy), Flush or FlushError (http.ResponseController)
// and Hijack. Unwrap gives http.ResponseController the writer underneath
// for deadlines and the like.
//
// While the response fits the replay buffer, a failed write to the client
// (it disconnected) is not reported to the handler: it goes on, and its
// whole response is recorded for the client's retry.
type capture struct {
	http.ResponseWriter
	m *middleware

	status   int  // the final status, 0 until the header is written
	overflow bool // the response outgrew the replay buffer; body was dropped
	hijacked bool
	*replayBuffer
}

// replayBuffer holds what a capture records for replay. Buffers are
// pooled: every protected request needs one, and the store copies what it
// keeps, so a buffer is free again once the result is recorded.
type replayBuffer struct {
	header http.Header // the replayable headers, as they were when the header was written
	values []string    // the backing array of header's values
	body   []byte
}

var replayBuffers = sync.Pool{New: func() any { return &replayBuffer{header: make(http.Header)} }}

// release returns the capture's buffer to the pool; the capture must not
// be used after. A buffer that grew large is dropped, so that one large
// response does not pin its size in the pool.
func (c *capture) release() {
	b := c.replayBuffer
	c.replayBuffer = nil
	if cap(b.body) > maxPooledBuffer || cap(b.values) > 64 {
		return
	}
	clear(b.header)
	clear(b.values) // drop the references to the handler's strings
	b.values, b.body = b.values[:0], b.body[:0]
	replayBuffers.Put(b)
}

// result returns the response to store. Its header and body are the
// pooled buffers' (nil when empty, as without a pool).
func (c *capture) result(status int) store.Result {
	res := store.Result{Status: status}
	if len(c.header) > 0 {
		res.Header = c.header
	}
	if len(c.body) > 0 {
		res.Body = c.body
	}
	return res
}

// commit records the status and snapshots the replayable headers, the
// moment the response header goes out.
func (c *capture) commit(status int) {
	c.status = status
	if c.replayBuffer == nil { // written to after the handler returned
		return
	}
	src := c.ResponseWriter.Header()
	if _, ok := src[HeaderExpiry]; !ok {
		// Set before the handler ran; a handler that sent a 1xx may have
		// cleared the header since (httputil.ReverseProxy does, after an
		// upstream's 103 Early Hints), and every answer to a keyed
		// request publishes the expiry policy.
		src[HeaderExpiry] = c.m.expiry
	}
	for _, name := range c.m.replayHeaders {
		if vs, ok := src[name]; ok {
			start := len(c.values)
			c.values = append(c.values, vs...)
			c.header[name] = c.values[start:len(c.values):len(c.values)]
		}
	}
}

// finalStatus is the status the client got, 200 when the handler wrote
// nothing (net/http answers 200 then).
func (c *capture) finalStatus() int {
	if c.status == 0 {
		c.commit(http.StatusOK)
	}
	return c.status
}

func (c *capture) WriteHeader(status int) {
	// Informational 1xx answers precede the real one; 101 switches
	// protocols and is final. A second final status is ignored by net/http,
	// so it is not recorded either.
	if c.status == 0 && !c.hijacked && (status < 100 || status > 199 || status == http.StatusSwitchingProtocols) {
		c.commit(status)
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *capture) Write(p []byte) (int, error) {
	if c.hijacked {
		return c.ResponseWriter.Write(p) // net/http answers ErrHijacked
	}
	if c.status == 0 {
		c.commit(http.StatusOK)
	}
	n, err := c.ResponseWriter.Write(p)
	return record(c, p, n, err)
}

// WriteString is Write for a string, which io.WriteString would otherwise
// copy into a new []byte first; the writer underneath has it too.
func (c *capture) WriteString(s string) (int, error) {
	if c.hijacked {
		return io.WriteString(c.ResponseWriter, s)
	}
	if c.status == 0 {
		c.commit(http.StatusOK)
	}
	n, err := io.WriteString(c.ResponseWriter, s)
	return record(c, s, n, err)
}

// record keeps p, which was just written to the client with the result
// n, err, for replay, and returns what the handler is told.
func record[T string | []byte](c *capture, p T, n int, err error) (int, error) {
	if err == http.ErrBodyNotAllowed { // HEAD, 204, 304: nothing to record
		return n, err
	}
	if c.overflow || c.replayBuffer == nil { // nil: written to after the handler returned
		return n, err
	}
	if len(c.body)+len(p) > c.m.maxBuffer {
		c.overflow, c.body = true, c.body[:0]
		return n, err
	}
	c.body = append(c.body, p...)
	return len(p), nil
}

// ReadFrom copies src through Write, so io.Copy to the writer is recorded.
// Once the response streams past the buffer it hands src to the writer
// underneath, which may use sendfile.
func (c *capture) ReadFrom(src io.Reader) (int64, error) {
	if c.overflow {
		return io.Copy(c.ResponseWriter, src)
	}
	return io.Copy(writerOnly{c}, src)
}

// writerOnly hides capture's ReadFrom from io.Copy, which would recurse.
type writerOnly struct{ io.Writer }

func (c *capture) Flush() { _ = c.FlushError() }

// FlushError is the method http.ResponseController.Flush calls.
func (c *capture) FlushError() error {
	if c.status == 0 && !c.hijacked {
		c.commit(http.StatusOK) // flushing sends the header
	}
	return http.NewResponseController(c.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler. What it then writes cannot
// be recorded, so the key's result is stored as not replayable.
func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err == nil {
		c.hijacked = true
	}
	return conn, rw, err
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (c *capture) Unwrap() http.ResponseWriter { return c.ResponseWriter }
