package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/internal/gateway"
)

// queue is a listener of the connections put in its channel, which wait
// there as in the kernel's queue until Accept takes them: a server on it
// runs in a synctest bubble, on the bubble's clock.
type queue struct {
	conns    chan net.Conn
	done     chan struct{}
	once     sync.Once
	accepted atomic.Int64
}

func newQueue() *queue { return &queue{conns: make(chan net.Conn, 1000), done: make(chan struct{})} }

func (l *queue) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		l.accepted.Add(1)
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *queue) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *queue) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090} }

// dial returns the client's end of a new in-memory connection and the
// server's.
func (l *queue) dial() (net.Conn, *closeNoted) {
	c, s := net.Pipe()
	sc := &closeNoted{Conn: s}
	l.conns <- sc
	return c, sc
}

// serveStartingOn serves the starting admin API on ln until the test ends.
func serveStartingOn(t *testing.T, ln net.Listener) {
	srv, limited := startingServer(gateway.Config{}, slog.New(slog.DiscardHandler), ln)
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(limited) }()
	t.Cleanup(func() { srv.Close(); <-served })
}

// closeNoted is the server's end of a connection: it tells whether the
// server closed it.
type closeNoted struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeNoted) Close() error { c.closed.Store(true); return c.Conn.Close() }

// The starting admin API (the store has not answered yet) had no write,
// read or idle deadline: a client that asked and never read the answer,
// or kept its connection idle, held it for as long as the store stayed
// down. Now each wait has the gateway's bound.
func TestStartingAdminBoundsItsConnections(t *testing.T) {
	for name, client := range map[string]func(c net.Conn){
		"never reads": func(c net.Conn) {
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n\r\n")
		},
		"idles": func(c net.Conn) {
			io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				io.Copy(io.Discard, resp.Body)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ln := newQueue()
				serveStartingOn(t, ln)
				c, sc := ln.dial()
				defer c.Close()
				go client(c)
				time.Sleep(10 * time.Minute)
				synctest.Wait()
				if !sc.closed.Load() {
					t.Error("the starting admin API still holds the connection after 10 min")
				}
			})
		})
	}
}

// Nor did it bound how many connections it held. Now it accepts as many as
// the gateway's admin API does; the others wait to be accepted.
func TestStartingAdminBoundsHowManyConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newQueue()
		serveStartingOn(t, ln)
		const clients = 80 // more than any modest bound
		for range clients {
			c, _ := ln.dial()
			t.Cleanup(func() { c.Close() })
			go io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n\r\n") // and never reads
		}
		synctest.Wait()
		if n := ln.accepted.Load(); n >= clients {
			t.Errorf("the starting admin API accepted all %d connections whose clients never read their answers; want a bound", n)
		}
	})
}
