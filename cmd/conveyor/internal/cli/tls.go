package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TLS settings of the Redis connection. go-redis makes a TLS connection for a rediss:// URL
// and verifies the server against the system's CAs. These flags add a private CA and the name
// to verify. They also add a client certificate, for a server started with --tls-auth-clients
// yes.
const (
	envTLSCA         = "CONVEYOR_TLS_CA"
	envTLSCert       = "CONVEYOR_TLS_CERT"
	envTLSKey        = "CONVEYOR_TLS_KEY"
	envTLSServerName = "CONVEYOR_TLS_SERVER_NAME"
)

// tlsFlags are --tls-ca, --tls-cert, --tls-key and --tls-server-name.
type tlsFlags struct {
	ca, cert, key, serverName string

	// config is what the flags add to the connection's TLS configuration, built by check;
	// nil when no TLS flag is set.
	config *tls.Config
}

// given reports whether any TLS flag (or its variable) is set.
func (t *tlsFlags) given() bool {
	return t.ca != "" || t.cert != "" || t.key != "" || t.serverName != ""
}

// check builds the TLS configuration from the flags for the Redis URL raw. Every error is a
// usage error naming the flag (or variable, as source says) and the file. Examples are a TLS
// flag with a URL that is not rediss://, and a certificate without its key. So is a file that
// cannot be read or holds no usable PEM.
func (t *tlsFlags) check(raw string, cluster bool, source func(flag string) string) error {
	t.config = nil
	if !t.given() {
		return nil
	}
	var set []string
	for _, f := range []struct{ name, val string }{{"tls-ca", t.ca}, {"tls-cert", t.cert}, {"tls-key", t.key}, {"tls-server-name", t.serverName}} {
		if f.val != "" {
			set = append(set, source(f.name))
		}
	}
	opt, err := parseRedisURL(raw, cluster)
	if err != nil {
		return nil // checkRedisURL reports the URL
	}
	if p := tlsConfigOf(opt); p == nil || *p == nil {
		return usageErrorf("TLS settings (%s) need a TLS connection, and %s is not one: use rediss://",
			strings.Join(set, ", "), redactURL(raw))
	}
	c := &tls.Config{ServerName: t.serverName}
	var errs []error
	if t.ca != "" {
		pool, err := readCA(t.ca)
		if err != nil {
			errs = append(errs, usageErrorf("%s %s: %v", source("tls-ca"), t.ca, err))
		}
		c.RootCAs = pool
	}
	switch {
	case t.cert != "" && t.key == "":
		errs = append(errs, usageErrorf("%s needs %s (the certificate's private key)", source("tls-cert"), source("tls-key")))
	case t.key != "" && t.cert == "":
		errs = append(errs, usageErrorf("%s needs %s (the client certificate)", source("tls-key"), source("tls-cert")))
	case t.cert != "":
		pair, err := loadKeyPair(t.cert, t.key)
		if err != nil {
			errs = append(errs, usageErrorf("%s %s and %s %s: %v", source("tls-cert"), t.cert, source("tls-key"), t.key, err))
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	t.config = c
	return nil
}

// readCA reads the PEM certificates of a CA file into a pool.
func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, readError(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in it (want a file of -----BEGIN CERTIFICATE----- blocks)")
	}
	return pool, nil
}

// loadKeyPair reads a PEM certificate and its key, saying which file is at fault.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.ReadFile(f); err != nil {
			return tls.Certificate{}, readError(err)
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, errors.New(strings.TrimPrefix(err.Error(), "tls: "))
	}
	return pair, nil
}

// readError says why a file could not be read, without repeating its path.
func readError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot read it: %w", pe.Err)
	}
	return err
}

// apply adds the flags' TLS settings to parsed Redis options whose URL asked for TLS. The
// options are *redis.Options, *redis.ClusterOptions or *redis.FailoverOptions. It keeps what
// go-redis set from the URL (the server name, the minimum version) unless a flag overrides it.
// dial calls it between parsing and connecting.
func (t *tlsFlags) apply(opt any) error {
	if t == nil || t.config == nil {
		return nil
	}
	p := tlsConfigOf(opt)
	if p == nil || *p == nil {
		return usageErrorf("the --tls-* flags apply to rediss:// URLs only")
	}
	c := (*p).Clone()
	if t.config.RootCAs != nil {
		c.RootCAs = t.config.RootCAs
	}
	if len(t.config.Certificates) > 0 {
		c.Certificates = t.config.Certificates
	}
	if t.config.ServerName != "" {
		c.ServerName = t.config.ServerName
	}
	*p = c
	return nil
}

// tlsConfigOf returns where parsed Redis options keep their TLS configuration (nil inside
// when the URL is not rediss://), or nil for an unknown options type.
func tlsConfigOf(opt any) **tls.Config {
	switch o := opt.(type) {
	case *redis.Options:
		return &o.TLSConfig
	case *redis.ClusterOptions:
		return &o.TLSConfig
	case *redis.FailoverOptions:
		return &o.TLSConfig
	case *redis.UniversalOptions:
		return &o.TLSConfig
	}
	return nil
}

// tlsRefusal says what went wrong when err is a failed TLS handshake with Redis, and "" when
// it is not. Either the server's certificate did not verify (an unknown CA, another name,
// expired). Or the server refused ours (a TLS alert: no client certificate, or one it does
// not trust).
func tlsRefusal(err error, url string) string {
	var verify *tls.CertificateVerificationError
	var host x509.HostnameError
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var op *net.OpError
	switch {
	case errors.As(err, &host):
		return fmt.Sprintf("the TLS certificate of Redis at %s did not verify: %s; connect with a name the certificate is for, or set one with --tls-server-name or $%s",
			url, strings.TrimPrefix(host.Error(), "x509: "), envTLSServerName)
	case errors.As(err, &unknownCA), errors.As(err, &invalid), errors.As(err, &verify):
		cause := err
		switch {
		case unknownCA.Cert != nil:
			cause = unknownCA
		case invalid.Cert != nil:
			cause = invalid
		case verify != nil:
			cause = verify.Err
		}
		return fmt.Sprintf("the TLS certificate of Redis at %s did not verify: %s; give the CA that signed it with --tls-ca or $%s",
			url, strings.TrimPrefix(cause.Error(), "x509: "), envTLSCA)
	case errors.As(err, &op) && op.Op == "remote error": // a TLS alert from the server
		return fmt.Sprintf("Redis at %s refused the TLS connection (%s); if it requires a client certificate, give one its CA signed with --tls-cert and --tls-key ($%s, $%s)",
			url, strings.TrimPrefix(op.Err.Error(), "tls: "), envTLSCert, envTLSKey)
	}
	return ""
}
