// Package faultproxy is a TCP proxy on loopback that injects network
// faults between a client and a real server: a reply lost after the server
// sent it (the server did the work, the client cannot know), and connections
// cut at once. Tests put it between a store and PostgreSQL or Redis.
package faultproxy

import (
	"net"
	"sync"
)

// Proxy forwards every connection accepted on Addr to the target.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	dropReply func(reply []byte) bool
	dropped   int
	closed    bool

	wg sync.WaitGroup
}

// New starts a proxy on a free loopback port in front of target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReplyOnce arms the proxy: the next chunk the server sends on any
// connection for which match returns true is not forwarded, and that
// connection is cut on both sides. The server has done the work; the
// client sees a broken connection. It fires once.
func (p *Proxy) DropReplyOnce(match func(reply []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropReply = match
}

// Dropped returns how many replies the proxy dropped.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// CutAll closes every open connection; new ones are still accepted.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy, cuts every connection and waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
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
// replies marks the server-to-client direction, where drops happen.
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
			if replies && p.shouldDrop(buf[:n]) {
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

func (p *Proxy) shouldDrop(reply []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropReply == nil || !p.dropReply(reply) {
		return false
	}
	p.dropReply = nil
	p.dropped++
	return true
}
