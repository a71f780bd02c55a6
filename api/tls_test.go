package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client certificate, as PEM.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := testPKI{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("worker", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func TestTLS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pki := newTestPKI(t)
	cfg := *b.cfg
	cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.ClientCAFile = pki.serverCert, pki.serverKey, pki.ca
	cfg.TLS.RequireWorkerCert = true
	srvTLS, err := ServerTLS(cfg.TLS)
	require.NoError(t, err)
	srv := New(b.with(Options{Config: &cfg, Auth: b.srv.auth, Logger: slog.New(slog.DiscardHandler)}))
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.TLS = srvTLS
	// As serve does: TLS above NewListener, whose connections keep their type, so client
	// certificates still reach the handlers.
	ts.Listener = NewListener(ts.Listener, time.Minute)
	ts.StartTLS()
	t.Cleanup(ts.Close)

	get := func(tc *tls.Config, method, path, token, body string) (int, error) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}

	t.Run("UntrustedServerRefused", func(t *testing.T) {
		t.Parallel()
		_, err := get(&tls.Config{MinVersion: tls.VersionTLS12}, http.MethodGet, "/healthz", "", "")
		require.Error(t, err, "the client must not trust an unknown CA")
	})
	t.Run("TrustedServer", func(t *testing.T) {
		t.Parallel()
		tc, err := client.TLSConfig(pki.ca, "", "")
		require.NoError(t, err)
		code, err := get(tc, http.MethodGet, "/healthz", "", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		code, err = get(tc, http.MethodGet, "/jobs", b.tokens["admin"], "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "agent and admin routes need no client certificate")
	})
	t.Run("WorkerRoutesNeedClientCert", func(t *testing.T) {
		t.Parallel()
		body := `{"worker_id":"w1","jobs":[]}`
		noCert, err := client.TLSConfig(pki.ca, "", "")
		require.NoError(t, err)
		code, err := get(noCert, http.MethodPost, "/internal/jobs/claim", b.tokens["worker"], body)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, code, "a worker token alone is not enough")
		withCert, err := client.TLSConfig(pki.ca, pki.clientCert, pki.clientKey)
		require.NoError(t, err)
		code, err = get(withCert, http.MethodPost, "/internal/jobs/claim", b.tokens["worker"], body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
	})
}
