package handlers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

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
