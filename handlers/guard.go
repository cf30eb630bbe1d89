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

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/conveyorq/conveyor/pipeline"
)

// ErrDestinationRefused is wrapped by the error of an "http" job whose request would reach an
// address the Guard refuses. It is also wrapped when the host name does not resolve. The two
// read alike, so the error tells nobody which internal names exist.
var ErrDestinationRefused = errors.New("destination refused")

// Guard decides which addresses the "http" handler may connect to. Once anyone can submit jobs
// (over the HTTP API, say), an http handler that reaches any address is a server-side request
// forgery tool. A job could read the cloud's metadata service (169.254.169.254), an admin page
// on loopback, or a service on the private network. By default a Guard refuses loopback,
// private, link-local, unspecified and multicast addresses. Private means RFC 1918, RFC 4193
// unique local and RFC 6598 shared. Allow names exceptions.
//
// The check is made on the address actually dialed, after DNS resolution, for every connection,
// redirects included. So a name that resolves to a refused address is refused all the same. So
// is one re-pointed after a first check (DNS rebinding), and a redirect to a refused address.
// The Guard's client uses no proxy from the environment, which would hide the destination.
//
// An address that carries an IPv4 address for a gateway to reach is judged by that IPv4 address.
// Those are IPv4-mapped (::ffff:0:0/96), NAT64's well-known prefix (64:ff9b::/96) and 6to4
// (2002::/16). Two kinds are refused whole: the local-use NAT64 prefix (64:ff9b:1::/48), whose
// layout each network chooses, and the deprecated IPv4-compatible addresses (::/96).
//
// A refusal's error says only that the destination was refused. It becomes the job's error,
// which whoever submitted the job may read. Where a name resolves inside the network is none of
// their business. The name, the address dialed and the rule that refused it go to the Guard's
// logger (WithLogger) at warn level.
type Guard struct {
	nets  []netip.Prefix
	hosts map[string]bool
	log   *zerolog.Logger // nil: zerolog's global logger, as it is when a refusal is logged
}

// WithLogger returns a copy of the Guard that logs each refusal to l. NewGuard's Guard logs to
// zerolog's global logger (github.com/rs/zerolog/log), read at each refusal. So an application
// that sets it up in main is heard from the package's default Guard too.
func (g *Guard) WithLogger(l zerolog.Logger) *Guard {
	c := *g
	c.log = &l
	return &c
}

// NewGuard returns a Guard that also allows each of allow. An entry is a CIDR prefix
// ("10.1.0.0/16"), an address ("127.0.0.1", "::1") or a host name ("hooks.internal"). A host
// name is matched without a port, case-insensitive; its connections are allowed whatever they
// resolve to.
//
// A prefix or address may be written in IPv4-mapped form (::ffff:10.0.0.0/104) or under NAT64's
// well-known prefix (64:ff9b::a00:0/104). It stands for the IPv4 prefix it embeds (10.0.0.0/8),
// by which addresses are judged. Some are refused with the reason: write the IPv4 prefix
// instead. Those are such prefixes of /96 or shorter, and any under 6to4 (2002::/16).
// (64:ff9b::/96 would allow every internal IPv4 address.)
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
			if p, err = allowPrefix(p); err != nil {
				return nil, fmt.Errorf("http allow %q: %w", a, err)
			}
			g.nets = append(g.nets, p)
		default:
			if ip, err := netip.ParseAddr(a); err == nil {
				p, err := allowPrefix(netip.PrefixFrom(ip, ip.BitLen()))
				if err != nil {
					return nil, fmt.Errorf("http allow %q: %w", a, err)
				}
				g.nets = append(g.nets, p)
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
		"::/96",          // unspecified, loopback, IPv4-compatible (deprecated)
		"::1/128",        // loopback
		"64:ff9b:1::/48", // local-use NAT64: its IPv4 layout is the network's own
		"fc00::/7",       // unique local
		"fe80::/10",      // link-local
		"ff00::/8",       // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Embedding prefixes: an address under one of them carries an IPv4 address.
var (
	nat64WKP  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// embedded is the address a connection to ip reaches in the end: the IPv4 address an
// IPv4-mapped, NAT64 (well-known prefix) or 6to4 address carries, else ip.
func embedded(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	b := ip.As16()
	switch {
	case nat64WKP.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return ip
}

// allowPrefix is an allowed prefix as the Guard compares it. One written in IPv4-mapped or NAT64
// form becomes the IPv4 prefix it embeds. Addresses are compared by what they embed, so as
// written it would match nothing.
func allowPrefix(p netip.Prefix) (netip.Prefix, error) {
	ip := p.Addr()
	var form string
	switch {
	case ip.Is4In6():
		form = "an IPv4-mapped"
	case nat64WKP.Contains(ip):
		form = "a NAT64 (64:ff9b::/96)"
	case sixToFour.Contains(ip):
		return netip.Prefix{}, errors.New("a 6to4 (2002::/16) prefix is judged by the IPv4 address it embeds: allow that IPv4 prefix instead")
	default:
		return p.Masked(), nil
	}
	if p.Bits() < 96 {
		return netip.Prefix{}, fmt.Errorf("%s prefix shorter than /96 reaches beyond the IPv4 addresses it embeds: allow the IPv4 prefix instead", form)
	}
	if p.Bits() == 96 {
		// Written to allow "NAT64" or "mapped addresses", it would open every internal IPv4
		// address; public ones are allowed in these forms already.
		return netip.Prefix{}, fmt.Errorf("%s /96 prefix embeds every IPv4 address, internal ones included: allow the IPv4 prefix instead (0.0.0.0/0 if that is meant)", form)
	}
	return netip.PrefixFrom(embedded(ip), p.Bits()-96).Masked(), nil
}

// Allowed reports whether the Guard lets a connection to ip through (host is the name the
// request used, before resolution).
func (g *Guard) Allowed(host string, ip netip.Addr) bool {
	_, ok := g.check(host, ip)
	return ok
}

// check is Allowed, with the rule that refused ip.
func (g *Guard) check(host string, ip netip.Addr) (netip.Prefix, bool) {
	if g.hosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return netip.Prefix{}, true
	}
	ip = embedded(ip)
	for _, p := range g.nets {
		if p.Contains(ip) {
			return netip.Prefix{}, true
		}
	}
	for _, p := range refusedNets {
		if p.Contains(ip) {
			return p, false
		}
	}
	return netip.Prefix{}, true
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
				g.refused(ctx, host, address, "cannot read the address")
				return ErrDestinationRefused
			}
			if rule, ok := g.check(host, ap.Addr()); !ok {
				g.refused(ctx, host, ap.Addr().String(), rule.String())
				return ErrDestinationRefused
			}
			return nil
		},
	}
	return d.DialContext(ctx, network, addr)
}

// refused logs a refused connection with what the job's error leaves out.
func (g *Guard) refused(ctx context.Context, host, address, rule string) {
	l := g.log
	if l == nil {
		l = &log.Logger
	}
	e := l.Warn().Str("host", host).Str("address", address).Str("refused_by", rule)
	if j, ok := ctx.Value(jobKey{}).(*pipeline.Job); ok {
		e = e.Str("queue", j.Queue).Str("job_id", j.ID).Int("attempt", j.Attempt)
	}
	e.Msg("http handler: destination refused: a loopback, private, link-local or otherwise internal address (allow it with --http-allow)")
}

// jobKey is the context key under which the http handler hands its job to the Guard's log.
type jobKey struct{}

// Client returns an http.Client whose every connection the Guard checks, with a timeout for a
// whole request (redirects included).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext
	return &http.Client{Timeout: timeout, Transport: t}
}
