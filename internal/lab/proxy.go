package lab

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// replyFault is what the proxy does to replies from the server.
type replyFault int32

const (
	replyPass    replyFault = iota // forward
	replyDrop                      // swallow every second reply and cut its connection: the command ran, the client never hears
	replyDelay                     // forward after proxy.delay
	linkCut                        // cut every connection and refuse new ones: a partition
	replyDropAll                   // swallow every reply and cut its connection
)

// proxy is a fault-injecting TCP proxy on loopback between workers and a
// server. Requests always reach the server; the fault hits the replies.
type proxy struct {
	ln       net.Listener
	upstream string
	delay    time.Duration
	fault    atomic.Int32
	replies  atomic.Int64 // counts replies under replyDrop: every second one is dropped

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newProxy(upstream string, delay time.Duration) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, delay: delay, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) set(f replyFault) {
	p.fault.Store(int32(f))
	if f == linkCut {
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	}
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if replyFault(p.fault.Load()) == linkCut {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, s)
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c); s.Close(); c.Close() }()
		go func() { defer p.wg.Done(); p.pump(c, s); s.Close(); c.Close() }()
	}
}

func (p *proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = true
	}
}

// pump copies the server's replies to the client, applying the fault.
func (p *proxy) pump(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			switch replyFault(p.fault.Load()) {
			case replyDrop:
				if p.replies.Add(1)%2 == 0 {
					return
				}
			case replyDropAll:
				return
			case replyDelay:
				time.Sleep(p.delay)
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// close stops the proxy and cuts every connection.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
