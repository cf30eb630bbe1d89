package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TLS flags that cannot work are usage errors (exit 2) naming the flag or variable and the
// file, before any connection.
func TestTLSFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate\n"), 0o600))
	missing := filepath.Join(dir, "missing.pem")
	const tlsURL = "rediss://127.0.0.1:1/0"
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		message string
	}{
		{"NotTLS", nil, []string{"stats", "--redis", noRedis, "--tls-ca", garbage},
			"TLS settings (--tls-ca) need a TLS connection, and redis://127.0.0.1:1/0 is not one: use rediss://"},
		{"NotTLSFromEnv", map[string]string{envTLSCA: garbage, envTLSServerName: "redis.internal"}, []string{"stats", "--redis", noRedis},
			"TLS settings ($CONVEYOR_TLS_CA, $CONVEYOR_TLS_SERVER_NAME) need a TLS connection"},
		{"NotTLSSentinel", nil, []string{"stats", "--redis", "redis://127.0.0.1:1?master_name=m", "--tls-ca", garbage},
			"TLS settings (--tls-ca) need a TLS connection, and redis://127.0.0.1:1?master_name=m is not one"},
		{"MalformedCASentinel", nil, []string{"stats", "--redis", "rediss://127.0.0.1:1?master_name=m", "--tls-ca", garbage},
			"--tls-ca " + garbage + ": no PEM certificate in it"},
		{"NotTLSCluster", nil, []string{"stats", "--cluster", "--redis", "redis://127.0.0.1:1?addr=127.0.0.1:2", "--tls-ca", garbage},
			"need a TLS connection"},
		{"MissingCA", nil, []string{"stats", "--redis", tlsURL, "--tls-ca", missing},
			"--tls-ca " + missing + ": cannot read it: no such file or directory"},
		{"MissingCAFromEnv", map[string]string{envTLSCA: missing}, []string{"stats", "--redis", tlsURL},
			"$CONVEYOR_TLS_CA " + missing + ": cannot read it"},
		{"MalformedCA", nil, []string{"stats", "--redis", tlsURL, "--tls-ca", garbage},
			"--tls-ca " + garbage + ": no PEM certificate in it"},
		{"CertWithoutKey", nil, []string{"stats", "--redis", tlsURL, "--tls-cert", garbage},
			"--tls-cert needs --tls-key"},
		{"KeyWithoutCert", map[string]string{envTLSKey: garbage}, []string{"stats", "--redis", tlsURL},
			"$CONVEYOR_TLS_KEY needs --tls-cert"},
		{"MissingKey", nil, []string{"stats", "--redis", tlsURL, "--tls-cert", garbage, "--tls-key", missing},
			"--tls-key " + missing + ": cannot read it: no such file or directory"},
		{"MalformedPair", nil, []string{"stats", "--redis", tlsURL, "--tls-cert", garbage, "--tls-key", garbage},
			"--tls-cert " + garbage + " and --tls-key " + garbage + ": failed to find any PEM data in certificate input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runWithEnv(t, tc.env, "", tc.args...)
			require.Equal(t, 2, code, "stderr:\n%s", stderr)
			require.Contains(t, stderr, tc.message)
			require.Empty(t, stdout)
		})
	}
}

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
		r := c.exec(t, "", append(env(c.url), envTLSCA+"="+srv.CAFile), "status", "--json", "--queue", queue, id)
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

// apply puts the flags' CA, certificate and name into whichever options the URL parses to,
// keeping what go-redis took from the URL otherwise.
func TestTLSApply(t *testing.T) {
	t.Parallel()
	pool := x509.NewCertPool()
	flags := &tlsFlags{config: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{{}}}}
	for _, tc := range []struct {
		url     string
		cluster bool
	}{
		{"rediss://127.0.0.1:6380/0", false},
		{"rediss://127.0.0.1:7000?addr=127.0.0.1:7001", true},
		{"rediss://127.0.0.1:26379?master_name=m&addr=127.0.0.1:26380", false},
	} {
		opt, err := parseRedisURL(tc.url, tc.cluster)
		require.NoError(t, err)
		require.NoError(t, flags.apply(opt))
		c := *tlsConfigOf(opt)
		require.Same(t, pool, c.RootCAs, "%T", opt)
		require.Len(t, c.Certificates, 1)
		require.Equal(t, "127.0.0.1", c.ServerName, "%T: the URL's host stays the name to verify", opt)

		named := &tlsFlags{config: &tls.Config{ServerName: "redis.internal"}}
		require.NoError(t, named.apply(opt))
		require.Equal(t, "redis.internal", (*tlsConfigOf(opt)).ServerName)
		require.Same(t, pool, (*tlsConfigOf(opt)).RootCAs, "a later apply keeps what it does not set")
	}
	plain, err := parseRedisURL("redis://127.0.0.1:6379/0", false)
	require.NoError(t, err)
	require.Error(t, flags.apply(plain))
}
