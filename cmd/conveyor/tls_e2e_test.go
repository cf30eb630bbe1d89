package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestTLSE2E runs the binary against redis-server with TLS only: a server that verifies
// against the CA given with --tls-ca (or $CONVEYOR_TLS_CA), one that also requires a client
// certificate (--tls-cert, --tls-key), and the refusals when either is missing or wrong.
func TestTLSE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildCLI(t)
	srv := redistest.StartTLS(t)
	mutual := redistest.StartTLS(t, redistest.RequireClientCert())
	queue := redistest.UniqueName(t)

	t.Run("ServerVerified", func(t *testing.T) {
		c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
		require.True(t, strings.HasPrefix(c.url, "rediss://"), c.url)
		id := c.publishOne(t, "--tls-ca", srv.CAFile, "--queue", queue, "--type", "echo", "--payload", `{"n":1}`)
		j := c.status(t, "--tls-ca", srv.CAFile, "--queue", queue, id)
		require.Equal(t, "queued", j.Status)

		// The same through the environment.
		r := c.exec(t, "", append(env(c.url), "CONVEYOR_TLS_CA="+srv.CAFile), "status", "--json", "--queue", queue, id)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, id)
	})

	t.Run("UnknownCA", func(t *testing.T) {
		c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
		// Without the CA (the system's CAs do not know the test's) and with another CA.
		for _, args := range [][]string{{}, {"--tls-ca", mutual.CAFile}} {
			args = append([]string{"stats", "--queue", queue}, args...)
			c.refused(t, 1, "the TLS certificate of Redis at "+srv.URL()+" did not verify: certificate signed by unknown authority", args...)
			require.Contains(t, c.run(t, args...).stderr, "; give the CA that signed it with --tls-ca or $CONVEYOR_TLS_CA\n")
		}
		// A worker stops at once with the reason, instead of waiting for a Redis that answers.
		c.refused(t, 1, "the TLS certificate of Redis at "+srv.URL()+" did not verify: certificate signed by unknown authority",
			"worker", "--queue", queue, "--log-level", "error")
	})

	t.Run("WrongName", func(t *testing.T) {
		c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
		c.refused(t, 1, "did not verify: certificate is valid for localhost, not redis.example; connect with a name the certificate is for, or set one with --tls-server-name",
			"stats", "--queue", queue, "--tls-ca", srv.CAFile, "--tls-server-name", "redis.example")
		// The name the certificate is for, other than the URL's host.
		c.ok(t, "stats", "--queue", queue, "--tls-ca", srv.CAFile, "--tls-server-name", "localhost")
	})

	t.Run("ClientCertificate", func(t *testing.T) {
		c := &cli{bin: bin, url: mutual.URL(), rdb: mutual.Client(t)}
		for _, cmd := range []string{"stats", "worker"} {
			c.refused(t, 1, "Redis at "+mutual.URL()+" refused the TLS connection (certificate required); if it requires a client certificate, give one its CA signed with --tls-cert and --tls-key",
				cmd, "--queue", queue, "--tls-ca", mutual.CAFile, "--log-level", "error")
		}

		tlsArgs := []string{"--tls-ca", mutual.CAFile, "--tls-cert", mutual.ClientCertFile, "--tls-key", mutual.ClientKeyFile}
		w := c.start(t, append([]string{"worker", "--queue", queue, "--log-level", "debug"}, tlsArgs...)...)
		id := c.publishOne(t, append([]string{"--queue", queue, "--type", "echo", "--payload", `{"over":"tls"}`}, tlsArgs...)...)
		var j jobView
		waitFor(t, 20*time.Second, 50*time.Millisecond, "the job to complete over TLS", func() bool {
			j = c.status(t, append([]string{"--queue", queue, id}, tlsArgs...)...)
			return j.Status == "completed"
		})
		require.JSONEq(t, `{"over":"tls"}`, string(j.Result))
		require.Equal(t, 0, w.stop(t), w.output.String())

		out := c.ok(t, append([]string{"doctor", "--json"}, tlsArgs...)...)
		require.Contains(t, out, `"check":"eviction","status":"ok"`)
	})
}
