package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// WithTLSConfig makes the default transport use tc (a CA for the API's certificate, a client
// certificate). Ignored with WithHTTPClient, whose transport is the caller's.
func WithTLSConfig(tc *tls.Config) Option { return func(c *Client) { c.tlsConfig = tc } }

// TLSConfig builds the TLS configuration of an API client from PEM files: caFile is the CA
// that signs the API's certificate (system roots when empty); certFile and keyFile are the
// client's own certificate (workers, when the API requires one). nil when all are empty.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" {
		return nil, nil
	}
	out := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("load the API's CA: %w", err)
		}
		out.RootCAs = x509.NewCertPool()
		if !out.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("load the API's CA: %s holds no PEM certificate", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate: %w", err)
		}
		out.Certificates = []tls.Certificate{cert}
	}
	return out, nil
}
