// Package faultproxy is a TCP proxy for fault-injection tests.
//
// A Proxy listens on 127.0.0.1 on a free port and forwards every connection to
// a target address. That is usually a private redis-server started with
// internal/redistest. Clients (go-redis) connect to Proxy.Addr instead of the
// server. By default traffic passes through unchanged. A test can then make the
// proxy lose replies, delay them, cut connections or refuse them.
//
// To lose replies, use DropNextReplies or DropRepliesRandomly, filtered with
// DropOnly. A reply the server sent is not forwarded. The client connection and
// its server connection are closed instead. So Redis applied the command but
// the client sees EOF. Unless MaxRetries is -1, go-redis then sends the command
// again.
//
// DelayReplies delays replies. CutAll cuts every open connection, and Refuse
// refuses new ones. Both simulate an unreachable server.
//
// The proxy does not parse RESP. A "reply" is whatever one read from the server
// connection returned. That chunk is usually one whole small reply. But a large
// reply may arrive in several chunks, and several pipelined replies may arrive
// in one. "The request" a reply answers is the last chunk read from the client
// on the same connection. So with pipelining, or with a request larger than one
// read, DropOnly's filter sees only that last chunk. It is not necessarily the
// whole command the reply answers.
//
// Note that go-redis sends HELLO and CLIENT SETINFO on every new connection:
// their replies are replies too. To lose the reply of one particular command,
// warm the connection up first (e.g. a PING), or filter with DropOnly.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds the proxy's dial to the target for each new connection.
const dialTimeout = 5 * time.Second

// bufSize is the size of the read buffer in each direction of a connection.
const bufSize = 32 << 10

// Proxy is a fault-injecting TCP proxy from 127.0.0.1:<free port> to a target
// address. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	accepted atomic.Int64
	dropped  atomic.Int64

	mu       sync.Mutex
	closed   bool
	conns    map[*pair]struct{}
	refuse   bool
	dropNext int
	dropProb float64
	match    func(request []byte) bool
	delay    time.Duration
}

// New starts a proxy to target (a "host:port" TCP address) on 127.0.0.1 on a
// free port. It does not dial target until a client connects. The caller
// must call Close.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// TB is the part of testing.TB that Start uses. It is an interface of its own so that the
// package does not import testing: the torture suite (internal/torture) links the proxy into
// the conveyor binary.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// Start is New for a test: it fails the test (tb.Fatal) if the proxy cannot
// start and closes the proxy in tb.Cleanup.
func Start(tb TB, target string) *Proxy {
	tb.Helper()
	p, err := New(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients connect to: "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Accepted returns how many client connections the proxy has accepted so
// far, including those it closed at once because of Refuse.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Dropped returns how many replies the proxy has dropped so far. Each drop
// closed one client connection.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// DropNextReplies makes the proxy drop the next n replies that match the
// DropOnly filter, across all connections. Instead of forwarding such a reply,
// it closes the client connection and its server connection. n <= 0 disarms it.
// It replaces any count still pending.
func (p *Proxy) DropNextReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropNext = max(n, 0)
}

// DropRepliesRandomly makes the proxy drop each reply that matches the DropOnly
// filter with probability prob. See DropNextReplies for what a drop does. prob
// <= 0 turns random drops off; prob >= 1 drops every reply.
func (p *Proxy) DropRepliesRandomly(prob float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropProb = max(prob, 0)
}

// DropOnly restricts DropNextReplies and DropRepliesRandomly to replies whose
// request matches. match is called with the last chunk the client sent on that
// connection before the reply arrived. The package doc says why that is not
// always the whole request. It must not keep or modify the slice. A nil match
// (the default) matches every reply.
func (p *Proxy) DropOnly(match func(request []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match = match
}

// RequestContains returns a DropOnly filter that matches requests containing
// s, ignoring ASCII case, e.g. RequestContains("EVALSHA").
func RequestContains(s string) func(request []byte) bool {
	want := bytes.ToUpper([]byte(s))
	return func(request []byte) bool { return bytes.Contains(bytes.ToUpper(request), want) }
}

// DelayReplies makes the proxy wait d before forwarding each reply chunk
// (0, the default, forwards at once). The delay applies to chunks that arrive
// after the call. Chunks of one connection stay in order, so a connection's
// replies are delayed by at least d each.
func (p *Proxy) DelayReplies(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

// Refuse makes the proxy close new client connections at once, without
// dialing the target, while on, simulating an unreachable server (the client
// sees its connection closed). Connections already open are not affected:
// use CutAll too to end them.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// CutAll closes every open connection (both its client and server side) now.
// New connections are accepted as usual unless Refuse is on.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	conns := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Close stops the proxy: it stops listening, closes every connection and
// waits until all of the proxy's goroutines have ended. It is safe to call
// more than once; later calls return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("faultproxy: %w", err)
	}
	return nil
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: back off a little rather
			// than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		refuse := p.closed || p.refuse
		p.mu.Unlock()
		if refuse {
			_ = client.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve dials the target for client and forwards traffic both ways until
// either side ends or the pair is closed.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &pair{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.forwardRequests(c)
	}()
	p.forwardReplies(c)
	wg.Wait()
}

// forwardRequests copies client to server, remembering the last chunk.
func (p *Proxy) forwardRequests(c *pair) {
	defer c.close()
	buf := make([]byte, bufSize)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			c.setLastRequest(buf[:n]) // before the server can answer it
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forwardReplies copies server to client, dropping or delaying replies as
// configured.
func (p *Proxy) forwardReplies(c *pair) {
	defer c.close()
	buf := make([]byte, bufSize)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			drop, delay := p.decide(c)
			if drop {
				p.dropped.Add(1)
				return // c.close() loses the reply and ends both sides
			}
			if delay > 0 {
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-c.done:
					t.Stop()
					return
				}
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// decide reports whether the reply chunk that just arrived on c must be
// dropped, and otherwise how long to delay it.
func (p *Proxy) decide(c *pair) (drop bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropNext > 0 || p.dropProb > 0 {
		if p.match == nil || c.requestMatches(p.match) {
			switch {
			case p.dropNext > 0:
				p.dropNext--
				return true, 0
			case p.dropProb >= 1 || rand.Float64() < p.dropProb:
				return true, 0
			}
		}
	}
	return false, p.delay
}

// pair is one proxied connection: a client connection and the server
// connection dialed for it.
type pair struct {
	client, server net.Conn
	done           chan struct{} // closed by close
	once           sync.Once

	mu      sync.Mutex
	lastReq []byte
}

// close closes both connections. It is idempotent.
func (c *pair) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// setLastRequest records a copy of the chunk the client just sent.
func (c *pair) setLastRequest(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastReq = append(c.lastReq[:0], b...)
}

// requestMatches calls match with the last chunk the client sent, under the
// lock that keeps forwardRequests from overwriting it meanwhile.
func (c *pair) requestMatches(match func(request []byte) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return match(c.lastReq)
}
