package faultproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/faultproxy"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDropReplyAfterServerDidTheWork sends INCR to the real Redis through
// the proxy with the reply dropped: the client gets a broken connection,
// and the server did run the command.
func TestDropReplyAfterServerDidTheWork(t *testing.T) {
	client := testenv.Redis(t)
	key := testenv.Prefix(t) + "n"
	p, err := faultproxy.New(client.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	cmd := "*2\r\n$4\r\nINCR\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n"
	if _, err := conn.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != ":1\r\n" {
		t.Fatalf("first INCR through the proxy = %q, %v; want :1", line, err)
	}
	p.DropReplyOnce(func(reply []byte) bool { return bytes.HasPrefix(reply, []byte(":")) })
	if _, err := conn.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("dropped reply arrived: %q", line)
	}
	if p.Dropped() != 1 {
		t.Fatalf("Dropped = %d; want 1", p.Dropped())
	}
	n, err := client.Get(context.Background(), key).Int()
	if err != nil || n != 2 {
		t.Fatalf("counter = %d, %v; want 2: the server ran the command whose reply was lost", n, err)
	}
	client.Del(context.Background(), key)

	// CutAll breaks open connections; new ones work.
	conn2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	conn2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn2.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	r2 := bufio.NewReader(conn2)
	if line, err := r2.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}
	p.CutAll()
	if _, err := r2.ReadString('\n'); err == nil {
		t.Fatal("connection survived CutAll")
	}
}
