package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// tlsSetup is the TLS configuration of a server started by StartTLS.
type tlsSetup struct {
	caFile, certFile, keyFile string      // the server's CA, certificate and key
	client                    *tls.Config // trusts the CA and presents the client certificate
}

// withTLS makes the server listen with TLS only (--port 0 --tls-port PORT).
func withTLS(t *tlsSetup) Option {
	return func(c *config) { c.tls = t }
}

// RequireClientCert makes a server started by StartTLS require a client
// certificate signed by its CA (--tls-auth-clients yes) instead of accepting
// clients without one (optional, the default). It is only valid with
// StartTLS.
func RequireClientCert() Option {
	return func(c *config) { c.requireClientCert = true }
}

// TLSServer is a private redis-server that accepts TLS connections only, with
// certificates generated for the test (see StartTLS).
//
// The embedded Server's URL is "rediss://127.0.0.1:PORT/0". Its Client trusts
// the CA and presents the client certificate. So it works whether or not client
// certificates are required. The ParseURL of go-redis does not trust the test
// CA: set TLSConfig.RootCAs (or use TLSConfig) after parsing.
type TLSServer struct {
	*Server

	CAFile         string // PEM certificate of the CA that signed both certificates
	ServerCertFile string // PEM certificate of the server, for 127.0.0.1 and localhost
	ServerKeyFile  string // PEM (PKCS #8) key of the server certificate
	ClientCertFile string // PEM certificate of a client, signed by the CA
	ClientKeyFile  string // PEM (PKCS #8) key of the client certificate

	// ClientCertRequired reports whether the server was started with
	// RequireClientCert.
	ClientCertRequired bool
}

// StartTLS generates a CA, a server certificate for 127.0.0.1 and localhost,
// and a client certificate, in a directory of tb.TempDir. The CA signs both. It
// starts a private server that listens with TLS only (--port 0 --tls-port
// PORT). Clients need not present a certificate unless the RequireClientCert
// option is given. Other options are as for Start. The server is stopped in
// tb.Cleanup. StartTLS fails the test (tb.Fatal) if it cannot start.
func StartTLS(tb testing.TB, opts ...Option) *TLSServer {
	tb.Helper()
	dir := tb.TempDir() // registered before Start's Cleanup, so removed after the server stops
	setup, files, err := writeCerts(dir)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s := Start(tb, append(opts, withTLS(setup))...)
	files.Server = s
	files.ClientCertRequired = s.cfg.requireClientCert
	return files
}

// TLSConfig returns a new client TLS configuration that trusts the CA and
// presents the client certificate.
func (s *TLSServer) TLSConfig() *tls.Config { return s.cfg.tls.client.Clone() }

// writeCerts generates the CA and the server and client certificates into
// dir and returns the server's TLS setup and a TLSServer holding the paths.
func writeCerts(dir string) (*tlsSetup, *TLSServer, error) {
	now := time.Now()
	newTemplate := func(cn string) (*x509.Certificate, error) {
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
		if err != nil {
			return nil, err
		}
		return &x509.Certificate{
			SerialNumber: serial,
			Subject:      pkix.Name{CommonName: cn, Organization: []string{"redistest"}},
			NotBefore:    now.Add(-time.Hour), // tolerate clock skew
			NotAfter:     now.Add(7 * 24 * time.Hour),
		}, nil
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl, err := newTemplate("redistest CA")
	if err != nil {
		return nil, nil, err
	}
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}

	// leaf signs a certificate for cn with the CA and writes it and its key.
	leaf := func(cn string, usage []x509.ExtKeyUsage, certFile, keyFile string, mod func(*x509.Certificate)) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl, err := newTemplate(cn)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = usage
		tmpl.BasicConstraintsValid = true
		if mod != nil {
			mod(tmpl)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("creating %s certificate: %w", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, err
		}
		return tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	}

	files := &TLSServer{
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
	if err := writePEM(files.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, nil, err
	}
	// The server certificate may also authenticate redis-server as a client
	// (it is its default certificate for outgoing connections).
	if _, err := leaf("127.0.0.1", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		files.ServerCertFile, files.ServerKeyFile, func(c *x509.Certificate) {
			c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			c.DNSNames = []string{"localhost"}
		}); err != nil {
		return nil, nil, err
	}
	clientCert, err := leaf("redistest client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		files.ClientCertFile, files.ClientKeyFile, nil)
	if err != nil {
		return nil, nil, err
	}

	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	setup := &tlsSetup{
		caFile:   files.CAFile,
		certFile: files.ServerCertFile,
		keyFile:  files.ServerKeyFile,
		client: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{clientCert},
			MinVersion:   tls.VersionTLS12,
		},
	}
	return setup, files, nil
}

// writePEM writes one PEM block to a new file readable only by its owner.
func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if data == nil {
		return errors.New("encoding PEM")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// clientConfig is the client TLS config of t, nil for a plain server (t nil).
func (t *tlsSetup) clientConfig() *tls.Config {
	if t == nil {
		return nil
	}
	return t.client
}
