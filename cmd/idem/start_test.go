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

// oneConn is a listener that hands out one connection, then waits to be
// closed: a server on it runs in a synctest bubble, on the bubble's clock.
type oneConn struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneConn) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090} }

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
				c, s := net.Pipe()
				defer c.Close()
				sc := &closeNoted{Conn: s}
				ln := &oneConn{conns: make(chan net.Conn, 1), done: make(chan struct{})}
				ln.conns <- sc
				srv := startingServer(gateway.Config{}, slog.New(slog.DiscardHandler))
				served := make(chan struct{})
				go func() { defer close(served); srv.Serve(ln) }()
				defer func() { srv.Close(); <-served }()
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
