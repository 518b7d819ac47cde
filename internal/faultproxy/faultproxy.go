// Package faultproxy is a TCP proxy on loopback that injects network
// faults between a client and a real server. Requests always reach the
// server; the faults hit its replies and the connections: a reply lost
// after the server sent it (the server did the work, the client cannot
// know), replies held back, connections cut at once, and a partition that
// refuses new ones. Tests put it between a store and PostgreSQL or Redis;
// the breach lab between its workers and Redis, between a Redis replica and
// its primary, and in front of PostgreSQL.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does to every reply until the next SetMode.
type Mode int32

const (
	// Forward passes every reply on: no fault.
	Forward Mode = iota
	// DropEverySecond swallows every second reply (counted over all
	// connections) and cuts its connection: the command ran, the client
	// never hears.
	DropEverySecond
	// DropAll swallows every reply and cuts its connection.
	DropAll
	// Delay forwards each reply after the delay set with SetDelay.
	Delay
	// Partition cuts every open connection and refuses new ones, as a
	// network partition does.
	Partition
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case DropEverySecond:
		return "drop every second reply"
	case DropAll:
		return "drop every reply"
	case Delay:
		return "delay replies"
	case Partition:
		return "partition"
	}
	return "unknown mode"
}

// Proxy forwards every connection accepted on Addr to the target.
type Proxy struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed by Close: ends every delay

	mu        sync.Mutex
	conns     map[net.Conn]struct{}   // guarded by mu
	mode      Mode                    // guarded by mu
	delay     time.Duration           // guarded by mu
	dropReply func(reply []byte) bool // guarded by mu
	dropLeft  int                     // replies dropReply still drops, guarded by mu
	replies   int                     // replies seen under DropEverySecond, guarded by mu
	dropped   int                     // guarded by mu
	closed    bool

	wg sync.WaitGroup
}

// New starts a proxy on a free loopback port in front of target
// (host:port), in mode Forward.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode sets what the proxy does to replies from now on. Partition
// also cuts every open connection. Under DropEverySecond the first reply
// after SetMode passes and the second is dropped.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode, p.replies = m, 0
	p.mu.Unlock()
	if m == Partition {
		p.CutAll()
	}
}

// SetDelay sets how long mode Delay holds each reply back.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// DropReplyOnce arms the proxy: the next chunk the server sends on any
// connection for which match returns true is not forwarded, and that
// connection is cut on both sides. The server has done the work; the
// client sees a broken connection. It fires once, in any mode.
func (p *Proxy) DropReplyOnce(match func(reply []byte) bool) { p.DropReplies(match, 1) }

// DropReplies is DropReplyOnce for the next n replies that match: each
// is dropped and its connection cut.
func (p *Proxy) DropReplies(match func(reply []byte) bool, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReply, p.dropLeft = match, n
}

// Dropped returns how many replies the proxy dropped, by DropReplyOnce
// and by the drop modes.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// CutAll closes every open connection; new ones are still accepted
// unless the mode is Partition.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy, cuts every connection and waits for its
// goroutines. Closing twice is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	close(p.done)
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.partitioned() {
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Go(func() { p.pipe(server, client, false) })
		p.wg.Go(func() { p.pipe(client, server, true) })
	}
}

func (p *Proxy) partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode == Partition
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst until either side closes, then closes both.
// replies marks the server-to-client direction, where the faults hit.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		dst.Close()
		src.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if replies && !p.pass(buf[:n]) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a cut: the other direction ends too
			return
		}
	}
}

// pass applies the armed drop and the mode to one reply: false means drop
// it and cut its connection. Under Delay it returns after the delay.
func (p *Proxy) pass(reply []byte) bool {
	p.mu.Lock()
	drop := false
	switch {
	case p.dropReply != nil && p.dropReply(reply):
		if p.dropLeft--; p.dropLeft <= 0 {
			p.dropReply = nil
		}
		drop = true
	case p.mode == DropEverySecond:
		p.replies++
		drop = p.replies%2 == 0
	case p.mode == DropAll, p.mode == Partition:
		drop = true
	}
	if drop {
		p.dropped++
	}
	delay := time.Duration(0)
	if p.mode == Delay {
		delay = p.delay
	}
	p.mu.Unlock()
	if drop {
		return false
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.done:
			return false
		}
	}
	return true
}
