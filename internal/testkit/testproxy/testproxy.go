package testproxy

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from its own loopback address to a target
// until the test ends.
type Proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	frozen map[net.Conn]bool
	wg     sync.WaitGroup
}

// New starts a proxy to target, stopped when t ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, frozen: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Stop)
	return p
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		u, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isFrozen(src) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) isFrozen(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen[c]
}

// Freeze turns every open connection into a black hole that stays open, as
// a stalled network or a half-open TCP connection would: what either side
// sends is dropped, and neither side hears of it. New connections work.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.frozen[c] = true
	}
}

// Retarget sends new connections to target, as a failover moves a server
// behind one address.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Drop cuts every open connection, leaving the listener up.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
		delete(p.frozen, c)
	}
}

// Stop closes the listener and every connection, and waits for the
// forwarding goroutines.
func (p *Proxy) Stop() {
	_ = p.ln.Close()
	p.Drop()
	p.wg.Wait()
}
