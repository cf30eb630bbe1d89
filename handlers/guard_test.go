package handlers

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// The default Guard refuses each internal class of address, checked on the address dialed;
// nothing needs to listen there: the dial is refused before it connects.
func TestGuardRefusesInternalDestinations(t *testing.T) {
	t.Parallel()
	h := HTTP(nil)
	for _, url := range []string{
		"http://127.0.0.1:9/",           // loopback
		"http://127.9.9.9:9/",           // all of 127/8
		"http://[::1]:9/",               // IPv6 loopback
		"http://10.1.2.3:9/",            // private
		"http://172.16.0.1:9/",          // private
		"http://192.168.1.1:9/",         // private
		"http://169.254.169.254/latest", // link-local: cloud metadata
		"http://[fe80::1]:9/",           // IPv6 link-local
		"http://0.0.0.0:9/",             // unspecified
		"http://[::]:9/",                // IPv6 unspecified
		"http://[fd00::1]:9/",           // unique local
		"http://100.64.0.1:9/",          // shared address space
		"http://localhost:9/",           // a name that resolves to loopback
		"http://[::ffff:127.0.0.1]:9/",  // IPv4-mapped loopback
	} {
		t.Run(url, func(t *testing.T) {
			t.Parallel()
			_, err := h(context.Background(), job(TypeHTTP, `{"url":"`+url+`"}`))
			require.ErrorIs(t, err, ErrDestinationRefused)
			require.True(t, pipeline.IsSkipRetry(err), "a refused destination is not retried: %v", err)
		})
	}
}

// An allowed destination is reached; a redirect from it to a refused address is refused, since
// every connection is checked.
func TestGuardAllowsAndChecksRedirects(t *testing.T) {
	t.Parallel()
	refused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("secret"))
	}))
	t.Cleanup(refused.Close)
	// The allowed server listens on another loopback address than the refused one.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	allowed := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, refused.URL, http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})}}
	allowed.Start()
	t.Cleanup(allowed.Close)

	g, err := NewGuard("127.0.0.2")
	require.NoError(t, err)
	h := HTTP(g.Client(DefaultHTTPTimeout))
	out, err := h(context.Background(), job(TypeHTTP, `{"url":"`+allowed.URL+`/"}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"status":200,"body":"ok"}`, string(out))

	_, err = h(context.Background(), job(TypeHTTP, `{"url":"`+allowed.URL+`/redirect"}`))
	require.ErrorIs(t, err, ErrDestinationRefused, "the redirect to %s", refused.URL)

	_, err = h(context.Background(), job(TypeHTTP, `{"url":"`+refused.URL+`"}`))
	require.ErrorIs(t, err, ErrDestinationRefused)

	// Allowing by network, or by host name, lets the refused one through too.
	for _, allow := range []string{"127.0.0.0/8", "localhost"} {
		g, err := NewGuard(allow)
		require.NoError(t, err)
		url := refused.URL
		if allow == "localhost" {
			_, port, _ := net.SplitHostPort(refused.Listener.Addr().String())
			url = "http://localhost:" + port
		}
		out, err := HTTP(g.Client(DefaultHTTPTimeout))(context.Background(), job(TypeHTTP, `{"url":"`+url+`"}`))
		require.NoError(t, err, allow)
		require.Contains(t, string(out), "secret")
	}
}

func TestNewGuardRefusesBadEntries(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "10.0.0.0/33", "a b", "http://x", "1.2.3.4/x"} {
		_, err := NewGuard(bad)
		require.Error(t, err, bad)
	}
	g, err := NewGuard("10.0.0.0/8", "::1", "Hooks.Internal.")
	require.NoError(t, err)
	require.True(t, g.Allowed("x", netip.MustParseAddr("10.2.3.4")))
	require.True(t, g.Allowed("x", netip.MustParseAddr("::1")))
	require.True(t, g.Allowed("hooks.internal", netip.MustParseAddr("192.168.0.1")))
	require.False(t, g.Allowed("x", netip.MustParseAddr("192.168.0.1")))
	require.True(t, g.Allowed("x", netip.MustParseAddr("93.184.216.34")), "public addresses are allowed")
	require.False(t, errors.Is(nil, ErrDestinationRefused))
}

// The job's error says the destination was refused and nothing of where a name resolves (it is
// readable over the API: an internal-DNS oracle otherwise); the worker's log has the details.
// Failed before: the error said "localhost resolves to 127.0.0.1".
func TestGuardErrorHidesTheAddress(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	g, err := NewGuard()
	require.NoError(t, err)
	g = g.WithLogger(zerolog.New(&logs))
	h := HTTP(g.Client(DefaultHTTPTimeout))
	const url = "http://localhost:9/x"
	_, err = h(context.Background(), job(TypeHTTP, `{"url":"`+url+`"}`))
	require.ErrorIs(t, err, ErrDestinationRefused)
	require.True(t, pipeline.IsSkipRetry(err))
	for _, leak := range []string{"127.0.0.1", "::1", "resolves", "loopback"} {
		require.NotContains(t, err.Error(), leak)
	}
	require.Contains(t, err.Error(), url, "the error names the job's own URL")
	line := logs.String()
	require.Contains(t, line, `"level":"warn"`)
	require.Contains(t, line, `"host":"localhost"`)
	require.Regexp(t, `"address":"(127\.0\.0\.1|::1)"`, line)
	require.Contains(t, line, `"job_id":"j1"`)
	require.Contains(t, line, `"refused_by":"`)
}

// NAT64 and 6to4 addresses carry an IPv4 address that a gateway or relay reaches: the
// well-known NAT64 prefix and 6to4 are judged by the address they embed, the local-use NAT64
// prefix (whose layout the operator chooses) is refused whole, and so are IPv4-compatible
// addresses. Failed before: every one of the refused rows was allowed.
func TestGuardEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	g, err := NewGuard()
	require.NoError(t, err)
	for _, c := range []struct {
		addr    string
		allowed bool
	}{
		{"64:ff9b::127.0.0.1", false},
		{"64:ff9b::169.254.169.254", false},
		{"64:ff9b::10.1.2.3", false},
		{"64:ff9b::192.168.0.1", false},
		{"64:ff9b:1::8.8.8.8", false},
		{"64:ff9b:1:2::1", false},
		{"2002:7f00:1::1", false},
		{"2002:a9fe:a9fe::1", false},
		{"2002:a01:203:4::5", false},
		{"::127.0.0.1", false},
		{"::10.0.0.1", false},
		{"64:ff9b::8.8.8.8", true},
		{"2002:808:808::1", true},
		{"2001:4860:4860::8888", true},
	} {
		require.Equal(t, c.allowed, g.Allowed("x", netip.MustParseAddr(c.addr)), c.addr)
	}
	// Over the handler too: the dial is refused before it connects.
	_, err = HTTP(g.Client(DefaultHTTPTimeout))(context.Background(), job(TypeHTTP, `{"url":"http://[64:ff9b::7f00:1]:9/"}`))
	require.ErrorIs(t, err, ErrDestinationRefused)

	// An allowed IPv4 prefix covers the NAT64 and 6to4 forms of its addresses.
	g, err = NewGuard("10.0.0.0/8")
	require.NoError(t, err)
	require.True(t, g.Allowed("x", netip.MustParseAddr("64:ff9b::10.1.2.3")))
	require.True(t, g.Allowed("x", netip.MustParseAddr("2002:a01:203::1")))
	require.False(t, g.Allowed("x", netip.MustParseAddr("64:ff9b::192.168.0.1")))
}

// --http-allow takes an IPv4-mapped prefix as the IPv4 prefix it maps (it was kept as an IPv6
// prefix that no address ever matched, since addresses are compared unmapped), and refuses
// one that cannot be read so, or that would open every IPv4 address, saying why. Failed before: ::ffff:10.0.0.0/104 allowed nothing.
func TestNewGuardIPv4MappedPrefixes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		allow string
		in    []string
		out   []string
	}{
		{"::ffff:10.0.0.0/104", []string{"10.1.2.3", "::ffff:10.9.9.9", "64:ff9b::10.1.1.1"}, []string{"172.16.0.1", "192.168.0.1"}},
		{"::ffff:127.0.0.1/128", []string{"127.0.0.1", "::ffff:127.0.0.1"}, []string{"127.0.0.2"}},
		{"::ffff:127.0.0.1", []string{"127.0.0.1"}, []string{"127.0.0.2"}},
		{"64:ff9b::a00:0/104", []string{"10.1.2.3", "64:ff9b::10.1.2.3"}, []string{"192.168.0.1"}},
	} {
		g, err := NewGuard(c.allow)
		require.NoError(t, err, c.allow)
		for _, a := range c.in {
			require.True(t, g.Allowed("x", netip.MustParseAddr(a)), "%s allows %s", c.allow, a)
		}
		for _, a := range c.out {
			require.False(t, g.Allowed("x", netip.MustParseAddr(a)), "%s refuses %s", c.allow, a)
		}
	}
	for _, c := range []struct{ allow, why string }{
		{"::ffff:0:0/95", "IPv4-mapped"},
		{"64:ff9b::/95", "NAT64"},
		{"64:ff9b::/96", "NAT64"},
		{"::ffff:0:0/96", "IPv4-mapped"},
		{"2002:a00::/24", "6to4"},
	} {
		_, err := NewGuard(c.allow)
		require.ErrorContains(t, err, c.why, c.allow)
		require.ErrorContains(t, err, "IPv4 prefix", c.allow)
	}
}

// A name that does not resolve reads exactly as a refused destination: "no such host" against
// "destination refused" told a job's submitter which internal names exist, and the DNS error
// named the network's resolver. A lookup that fails for a while (a timeout) stays retryable,
// and names no resolver either.
func TestHTTPDNSErrorIsGeneric(t *testing.T) {
	t.Parallel()
	dnsErr := func(notFound bool) *http.Client {
		return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: r.URL.Hostname(),
				Server: "10.0.0.2:53", IsNotFound: notFound, IsTimeout: !notFound}}
		})}
	}
	g, err := NewGuard()
	require.NoError(t, err)
	g = g.WithLogger(zerolog.Nop())
	_, refused := HTTP(g.Client(DefaultHTTPTimeout))(context.Background(), job(TypeHTTP, `{"url":"http://localhost:9/x"}`))
	require.Error(t, refused)
	_, unknown := HTTP(dnsErr(true))(context.Background(), job(TypeHTTP, `{"url":"http://localhost:9/x"}`))
	require.Error(t, unknown)
	require.Equal(t, refused.Error(), unknown.Error(), "a name that does not resolve reads as a refused one")
	require.True(t, pipeline.IsSkipRetry(unknown))
	_, later := HTTP(dnsErr(false))(context.Background(), job(TypeHTTP, `{"url":"http://db.internal/x"}`))
	require.Error(t, later)
	require.False(t, pipeline.IsSkipRetry(later), "a lookup that timed out is tried again")
	for _, err := range []error{unknown, later} {
		for _, leak := range []string{"10.0.0.2", "no such host", "lookup", ":53"} {
			require.NotContains(t, err.Error(), leak)
		}
	}
}
