package faultproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup starts a proxy in front of the real Redis and returns it, a client
// of the server itself (not through the proxy) and a fresh key.
func setup(t *testing.T) (*faultproxy.Proxy, *redis.Client, string) {
	t.Helper()
	client := testenv.Redis(t)
	key := testenv.Prefix(t) + "n"
	t.Cleanup(func() { client.Del(context.Background(), key) })
	p, err := faultproxy.New(client.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, client, key
}

// conn is one raw RESP connection through the proxy.
type conn struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *faultproxy.Proxy) *conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return &conn{c: c, r: bufio.NewReader(c)}
}

// send writes one command; reply reads one reply line.
func (c *conn) send(t *testing.T, args ...string) {
	t.Helper()
	cmd := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		cmd += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	if _, err := c.c.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
}

func (c *conn) reply() (string, error) { return c.r.ReadString('\n') }

// cut reports whether err is what a connection cut by the proxy reads:
// an error, and not the test's own deadline (a reply that never came on a
// connection left open).
func cut(err error) bool { return err != nil && !errors.Is(err, os.ErrDeadlineExceeded) }

// counter reads the key's value on the server itself.
func counter(t *testing.T, client *redis.Client, key string) int {
	t.Helper()
	n, err := client.Get(context.Background(), key).Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDropReplyAfterServerDidTheWork sends INCR to the real Redis through
// the proxy with the reply dropped: the client gets a broken connection,
// and the server did run the command.
func TestDropReplyAfterServerDidTheWork(t *testing.T) {
	p, client, key := setup(t)
	c := dial(t, p)
	c.send(t, "INCR", key)
	if line, err := c.reply(); err != nil || line != ":1\r\n" {
		t.Fatalf("first INCR through the proxy = %q, %v; want :1", line, err)
	}
	p.DropReplyOnce(func(reply []byte) bool { return bytes.HasPrefix(reply, []byte(":")) })
	c.send(t, "INCR", key)
	if line, err := c.reply(); !cut(err) {
		t.Fatalf("dropped reply: %q, %v; want the connection cut", line, err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("Dropped = %d; want 1", p.Dropped())
	}
	if n := counter(t, client, key); n != 2 {
		t.Fatalf("counter = %d; want 2: the server ran the command whose reply was lost", n)
	}

	// It fired once; CutAll breaks open connections, new ones work.
	c2 := dial(t, p)
	c2.send(t, "PING")
	if line, err := c2.reply(); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}
	p.CutAll()
	if _, err := c2.reply(); !cut(err) {
		t.Fatalf("connection after CutAll: %v; want it cut", err)
	}
}

// TestDropEverySecond: of four INCRs, each on a new connection, the
// second and fourth replies are lost; the server ran all four.
func TestDropEverySecond(t *testing.T) {
	p, client, key := setup(t)
	p.SetMode(faultproxy.DropEverySecond)
	for i := 1; i <= 4; i++ {
		c := dial(t, p)
		c.send(t, "INCR", key)
		line, err := c.reply()
		if i%2 == 1 && (err != nil || line != ":"+strconv.Itoa(i)+"\r\n") {
			t.Fatalf("INCR %d = %q, %v; want :%d", i, line, err, i)
		}
		if i%2 == 0 && !cut(err) {
			t.Fatalf("INCR %d = %q, %v; want the reply dropped and the connection cut", i, line, err)
		}
	}
	if p.Dropped() != 2 {
		t.Fatalf("Dropped = %d; want 2", p.Dropped())
	}
	if n := counter(t, client, key); n != 4 {
		t.Fatalf("counter = %d; want 4: the server ran every command", n)
	}
}

// TestDropAll: every reply is lost until the mode goes back to Forward.
func TestDropAll(t *testing.T) {
	p, _, key := setup(t)
	p.SetMode(faultproxy.DropAll)
	for i := range 2 {
		c := dial(t, p)
		c.send(t, "INCR", key)
		if line, err := c.reply(); !cut(err) {
			t.Fatalf("INCR %d = %q, %v; want the reply dropped and the connection cut", i, line, err)
		}
	}
	p.SetMode(faultproxy.Forward)
	c := dial(t, p)
	c.send(t, "INCR", key)
	if line, err := c.reply(); err != nil || line != ":3\r\n" {
		t.Fatalf("INCR after Forward = %q, %v; want :3 (the server ran the two dropped ones)", line, err)
	}
	if p.Dropped() != 2 {
		t.Fatalf("Dropped = %d; want 2", p.Dropped())
	}
}

// TestDelay: a reply is held back for the delay, then arrives whole.
func TestDelay(t *testing.T) {
	p, _, key := setup(t)
	const delay = 300 * time.Millisecond
	p.SetDelay(delay)
	p.SetMode(faultproxy.Delay)
	c := dial(t, p)
	start := time.Now()
	c.send(t, "INCR", key)
	// The proxy starts holding the reply after the server sent it, which is
	// after start: it cannot arrive within half the delay.
	c.c.SetReadDeadline(start.Add(delay / 2))
	if line, err := c.reply(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read within half the delay = %q, %v; want a deadline error", line, err)
	}
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := c.reply(); err != nil || line != ":1\r\n" {
		t.Fatalf("delayed reply = %q, %v; want :1", line, err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("reply arrived after %v; want at least %v", took, delay)
	}
}

// TestCloseEndsADelay: Close does not wait out a reply held back for an hour.
func TestCloseEndsADelay(t *testing.T) {
	p, _, key := setup(t)
	p.SetDelay(time.Hour)
	p.SetMode(faultproxy.Delay)
	c := dial(t, p)
	c.send(t, "INCR", key)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	if line, err := c.reply(); !cut(err) {
		t.Fatalf("reply through a closed proxy = %q, %v; want the connection cut", line, err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits on a delayed reply after 5s")
	}
}

// TestPartition: the open connection is cut and new ones are refused until
// the mode goes back to Forward.
func TestPartition(t *testing.T) {
	p, _, _ := setup(t)
	c := dial(t, p)
	c.send(t, "PING")
	if line, err := c.reply(); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}
	p.SetMode(faultproxy.Partition)
	if line, err := c.reply(); !cut(err) {
		t.Fatalf("open connection in the partition read %q, %v; want it cut", line, err)
	}
	refused := dial(t, p) // the proxy accepts it and closes it at once
	if line, err := refused.reply(); !cut(err) {
		t.Fatalf("new connection in the partition read %q, %v; want it closed", line, err)
	}
	p.SetMode(faultproxy.Forward)
	healed := dial(t, p)
	healed.send(t, "PING")
	if line, err := healed.reply(); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING after the partition = %q, %v", line, err)
	}
}
