package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/store"
)

// pipeListener is a listener of in-memory connections (net.Pipe), so that
// a server runs in a synctest bubble: its waits are durable and its
// deadlines run on the bubble's clock. Dialed connections wait in a
// queue, as in the kernel's, until Accept takes them.
type pipeListener struct {
	conns    chan *pipeConn
	done     chan struct{}
	once     sync.Once
	accepted atomic.Int64
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan *pipeConn, 1000), done: make(chan struct{})}
}

// dial returns the client's end of a new connection and the server's.
func (l *pipeListener) dial() (net.Conn, *pipeConn) {
	c, s := net.Pipe()
	sc := &pipeConn{Conn: s}
	l.conns <- sc
	return c, sc
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		l.accepted.Add(1)
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return testAdmin }

// pipeConn is the server's end of a connection: it tells whether the
// server closed it.
type pipeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *pipeConn) Close() error { c.closed.Store(true); return c.Conn.Close() }

// serveAdminPipes serves g's admin API on a pipeListener until the test ends.
func serveAdminPipes(t *testing.T, g *Gateway) *pipeListener {
	ln := newPipeListener()
	srv, served := g.adminServer(ln)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(served) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln
}

// askUnread sends, on a new connection, a request for the key's stored
// response (256 KiB) and never reads the answer. A pipe buffers nothing:
// the server's first write of it waits.
func askUnread(t *testing.T, ln *pipeListener) *pipeConn {
	t.Helper()
	c, sc := ln.dial()
	t.Cleanup(func() { c.Close() })
	go io.WriteString(c, "GET /v1/keys/acme/big/result HTTP/1.1\r\nHost: "+testAdmin+"\r\nAuthorization: Bearer tok-0123456789abcdef\r\n\r\n")
	return sc
}

func bigKeyGateway(t *testing.T) *Gateway {
	g := adminGateway(t, Config{AdminToken: "tok-0123456789abcdef"})
	settle(t, g, "big", &store.Result{Status: 200, Body: bytes.Repeat([]byte("x"), 256<<10)})
	return g
}

// A client that asks the admin API for a large answer and never reads it
// held a goroutine and the answer's buffers for ever: the admin server
// had no write deadline. Now it gives up on the connection once no
// legitimate call could still be running (adminWriteTimeout: 77 s with
// the defaults).
func TestAdminGivesUpOnAnUnreadAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := serveAdminPipes(t, bigKeyGateway(t))
		sc := askUnread(t, ln)
		time.Sleep(time.Minute)
		synctest.Wait()
		if sc.closed.Load() {
			t.Fatal("the admin server gave up on a connection within a minute; a legitimate call (a reconciliation) may wait that long")
		}
		time.Sleep(9 * time.Minute)
		synctest.Wait()
		if !sc.closed.Load() {
			t.Fatal("the admin server still holds, after 10 min, a connection whose client never reads its answer; want it closed at its write deadline")
		}
	})
}

// Many such clients held many connections, without bound. Now the admin
// listener accepts a bounded number (adminMaxConns) and the others wait
// to be accepted until a held one is given up.
func TestAdminBoundsItsConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := serveAdminPipes(t, bigKeyGateway(t))
		const clients = 80 // more than any modest bound
		held := make([]*pipeConn, clients)
		for i := range held {
			held[i] = askUnread(t, ln)
		}
		synctest.Wait()
		if n := ln.accepted.Load(); n >= clients {
			t.Errorf("the admin server accepted all %d connections whose clients never read their answers; want a bound", n)
		}
		probe, _ := ln.dial()
		defer probe.Close()
		answered := make(chan int, 1)
		go func() {
			io.WriteString(probe, "GET /healthz HTTP/1.1\r\nHost: "+testAdmin+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(probe), nil)
			if err != nil {
				answered <- 0
				return
			}
			answered <- resp.StatusCode
		}()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		for i, sc := range held {
			if !sc.closed.Load() {
				t.Fatalf("connection %d, whose client never reads, is still open after 10 min", i)
			}
		}
		select {
		case code := <-answered:
			if code != http.StatusOK {
				t.Errorf("GET /healthz after the held connections = %d; want 200", code)
			}
		default:
			t.Error("GET /healthz, queued behind the held connections, is not answered once they are given up")
		}
	})
}
