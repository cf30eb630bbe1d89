package handlers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrDestinationRefused is wrapped by the error of an "http" job whose request would reach an
// address the Guard refuses.
var ErrDestinationRefused = errors.New("destination refused")

// Guard decides which addresses the "http" handler may connect to. Once anyone can submit
// jobs (over the HTTP API, say), an http handler that reaches any address is a server-side
// request forgery tool: a job could read the cloud's metadata service (169.254.169.254), an
// admin page on loopback or a service on the private network. By default a Guard refuses
// loopback, private (RFC 1918, RFC 4193 unique local, RFC 6598 shared), link-local,
// unspecified and multicast addresses; Allow names exceptions.
//
// The check is made on the address actually dialed, after DNS resolution, for every
// connection, redirects included: a name that resolves to a refused address, or one that is
// re-pointed after a first check (DNS rebinding), or a redirect to a refused address, is
// refused all the same. The Guard's client uses no proxy from the environment, which would
// hide the destination.
type Guard struct {
	nets  []netip.Prefix
	hosts map[string]bool
}

// NewGuard returns a Guard that also allows each of allow: a CIDR prefix ("10.1.0.0/16"), an
// address ("127.0.0.1", "::1") or a host name ("hooks.internal", matched without a port,
// case-insensitive; its connections are allowed whatever they resolve to).
func NewGuard(allow ...string) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			return nil, errors.New("http allow: empty entry")
		case strings.Contains(a, "/"):
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("http allow %q: %w", a, err)
			}
			g.nets = append(g.nets, p.Masked())
		default:
			if ip, err := netip.ParseAddr(a); err == nil {
				g.nets = append(g.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if strings.ContainsAny(a, ":/ ") {
				return nil, fmt.Errorf("http allow %q: want a CIDR prefix, an address or a host name", a)
			}
			g.hosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
		}
	}
	return g, nil
}

// refusedNets are the address ranges a Guard refuses unless allowed.
var refusedNets = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network", unspecified
		"10.0.0.0/8",     // private
		"100.64.0.0/10",  // shared address space (carrier-grade NAT)
		"127.0.0.0/8",    // loopback
		"169.254.0.0/16", // link-local, cloud metadata services
		"172.16.0.0/12",  // private
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // private
		"198.18.0.0/15",  // benchmarking
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, broadcast
		"::/128",         // unspecified
		"::1/128",        // loopback
		"fc00::/7",       // unique local
		"fe80::/10",      // link-local
		"ff00::/8",       // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Allowed reports whether the Guard lets a connection to ip through (host is the name the
// request used, before resolution).
func (g *Guard) Allowed(host string, ip netip.Addr) bool {
	if g.hosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return true
	}
	ip = ip.Unmap()
	for _, p := range g.nets {
		if p.Contains(ip) {
			return true
		}
	}
	for _, p := range refusedNets {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// DialContext dials like net.Dialer, refusing addresses the Guard does not allow; it is what
// the Guard's client's transport dials with.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{
		Timeout:   10 * time.Second,
		KeepAlive: 30 * time.Second,
		// Control runs for every address the dialer tries, after resolution: the check
		// is on what is dialed, not on what the URL said.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: cannot read address %q", ErrDestinationRefused, address)
			}
			if !g.Allowed(host, ap.Addr()) {
				return fmt.Errorf("%w: %s resolves to %s, a loopback, private, link-local or otherwise internal address (allow it with --http-allow)",
					ErrDestinationRefused, host, ap.Addr())
			}
			return nil
		},
	}
	return d.DialContext(ctx, network, addr)
}

// Client returns an http.Client whose every connection the Guard checks, with a timeout for a
// whole request (redirects included).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext
	return &http.Client{Timeout: timeout, Transport: t}
}
