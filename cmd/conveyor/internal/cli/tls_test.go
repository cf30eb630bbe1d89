package cli

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
