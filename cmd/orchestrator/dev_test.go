package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
	"github.com/gpuorch/orchestrator/config"
)

// TestDevTokens checks when dev mode runs without tokens: only when none is configured by any
// means, and then only on loopback; a tokens setting that holds no token is refused.
func TestDevTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	_, line, err := api.GenerateToken("admin", "")
	require.NoError(t, err)
	cfgOn := func(addr, tokensFile string) *config.Config {
		cfg := embeddedConfig(t, dir)
		cfg.HTTPAddr, cfg.TokensFile = addr, tokensFile
		return cfg
	}

	for name, content := range map[string]string{"empty": "", "comments": "# tokens go here\n\n   # none yet\n"} {
		path := write(name, content)
		_, err := loadAuth(cfgOn("127.0.0.1:8080", path), "", true)
		require.ErrorContains(t, err, path, "the error names the file")
		require.ErrorContains(t, err, "holds no token")
		_, err = loadAuth(cfgOn("127.0.0.1:8080", path), "", false)
		require.ErrorContains(t, err, path, "serve refuses it too")
	}
	_, err = loadAuth(cfgOn("127.0.0.1:8080", ""), " ; ", true)
	require.ErrorContains(t, err, api.TokensEnv+" is set but holds no token")

	// ORCH_API_TOKENS alone is tokens configured: any address, no tokenless mode.
	auth, err := loadAuth(cfgOn("0.0.0.0:8080", ""), line, true)
	require.NoError(t, err)
	require.False(t, auth.AllowUnauthenticatedLoopback)
	require.Equal(t, 1, auth.Tokens.Len())
	// So is a tokens file.
	auth, err = loadAuth(cfgOn("0.0.0.0:8080", write("tokens", line+"\n")), "", true)
	require.NoError(t, err)
	require.False(t, auth.AllowUnauthenticatedLoopback)

	// No token at all: tokenless, on loopback only.
	auth, err = loadAuth(cfgOn("127.0.0.1:8080", ""), "", true)
	require.NoError(t, err)
	require.True(t, auth.AllowUnauthenticatedLoopback)
	for _, addr := range []string{"0.0.0.0:8080", "[::]:8080", ":8080", "192.0.2.1:8080"} {
		_, err = loadAuth(cfgOn(addr, ""), "", true)
		require.ErrorContains(t, err, "loopback only", addr)
	}
	// serve never runs tokenless.
	auth, err = loadAuth(cfgOn("0.0.0.0:8080", ""), "", false)
	require.NoError(t, err)
	require.False(t, auth.AllowUnauthenticatedLoopback)
}

// TestDevCommandRefusesEmptyTokensFile runs `orchestrator dev` itself with a tokens file that
// holds only a comment, on every address: it refuses to start, naming the file, before it
// opens anything.
func TestDevCommandRefusesEmptyTokensFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(path, []byte("# no token yet\n"), 0o600))
	for k, v := range map[string]string{
		"ORCH_TOKENS_FILE": path, "ORCH_API_TOKENS": "", "ORCH_HTTP_ADDR": "0.0.0.0:0", "ORCH_DATA_DIR": dir,
		"ORCH_EMBEDDED_REDIS_ADDR": "127.0.0.1:0", "ORCH_SIM_GPUS": "", "ORCH_CONFIG": "",
	} {
		t.Setenv(k, v)
	}
	cmd := devCmd()
	cmd.SetArgs(nil)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetContext(t.Context())
	err := cmd.Execute()
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "holds no token")
	_, statErr := os.Stat(filepath.Join(dir, "orchestrator.db"))
	require.ErrorIs(t, statErr, os.ErrNotExist, "refused before the database was opened")
}

// devPKI writes a self-signed server certificate that names localhost only (not 127.0.0.1,
// where dev listens: only a worker that trusts the certificate itself, not a name, gets
// through), and a client CA with a worker certificate it signed.
type devPKI struct{ serverCert, serverKey, clientCA, clientCert, clientKey string }

func newDevPKI(t *testing.T) devPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	cert := func(name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl.Subject = pkix.Name{CommonName: name}
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		require.NoError(t, err)
		parsed, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return parsed, key, write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	var p devPKI
	_, _, p.serverCert, p.serverKey = cert("server", &x509.Certificate{SerialNumber: big.NewInt(1),
		DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, nil, nil)
	ca, caKey, caPath, _ := cert("ca", &x509.Certificate{SerialNumber: big.NewInt(2), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}, nil, nil)
	p.clientCA = caPath
	_, _, p.clientCert, p.clientKey = cert("worker", &x509.Certificate{SerialNumber: big.NewInt(3),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, caKey)
	return p
}

// TestDevTLS runs dev mode (runServer with devOptions) serving HTTPS with a self-signed
// certificate, and with worker certificates required: the in-process worker calls https,
// trusts the certificate the server serves, presents its client certificate, and runs a job
// to the end.
func TestDevTLS(t *testing.T) {
	t.Parallel()
	pki := newDevPKI(t)
	run := func(t *testing.T, mutual bool) {
		cfg := embeddedConfig(t, t.TempDir())
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.TLS.CertFile, cfg.TLS.KeyFile = pki.serverCert, pki.serverKey
		if mutual {
			cfg.TLS.ClientCAFile, cfg.TLS.RequireWorkerCert = pki.clientCA, true
			cfg.TLS.ClientCertFile, cfg.TLS.ClientKeyFile = pki.clientCert, pki.clientKey
		}
		log := slog.New(slog.DiscardHandler)
		opts := devOptions(cfg, log, io.Discard)
		up := make(chan selfAPI, 1)
		ready := opts.ready
		opts.ready = func(ctx context.Context, c *core, self selfAPI) (func(), error) {
			wait, err := ready(ctx, c, self)
			up <- self
			return wait, err
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- runServer(ctx, cfg, log, opts) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-done)
		})
		var self selfAPI
		select {
		case self = <-up:
		case err := <-done:
			t.Fatalf("dev mode stopped: %v", err)
		}
		require.True(t, strings.HasPrefix(self.url, "https://127.0.0.1:"), self.url)

		// An agent that trusts the certificate, by the name it carries.
		pem, err := os.ReadFile(pki.serverCert)
		require.NoError(t, err)
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(pem))
		agent := client.New(self.url, "", client.WithTLSConfig(&tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}))
		resp, err := agent.Submit(ctx, client.SubmitRequest{Type: "noop", Agent: "dev", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		var status string
		require.Eventually(t, func() bool {
			job, err := agent.GetJob(ctx, resp.JobID)
			if err != nil {
				return false
			}
			status = job.Status
			return status == "done" || status == "failed" || status == "dead_letter" || status == "cancelled"
		}, 2*time.Minute, 20*time.Millisecond, "the in-process worker finished no job")
		require.Equal(t, "done", status)
	}
	t.Run("SelfSigned", func(t *testing.T) { t.Parallel(); run(t, false) })
	t.Run("WorkerCertRequired", func(t *testing.T) { t.Parallel(); run(t, true) })
}

// TestPinnedWorkerTLS checks the in-process worker's refusals: a certificate other than the
// server's own, and require_worker_cert without a client certificate to present.
func TestPinnedWorkerTLS(t *testing.T) {
	t.Parallel()
	pki := newDevPKI(t)
	serverTLS, err := api.ServerTLS(config.TLS{CertFile: pki.serverCert, KeyFile: pki.serverKey})
	require.NoError(t, err)
	tc, err := pinnedWorkerTLS(config.TLS{}, serverTLS)
	require.NoError(t, err)
	other, err := tls.LoadX509KeyPair(pki.clientCert, pki.clientKey)
	require.NoError(t, err)
	require.NoError(t, tc.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{serverTLS.Certificates[0].Leaf}}))
	leaf, err := x509.ParseCertificate(other.Certificate[0])
	require.NoError(t, err)
	require.Error(t, tc.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}))
	require.Error(t, tc.VerifyConnection(tls.ConnectionState{}))

	_, err = pinnedWorkerTLS(config.TLS{RequireWorkerCert: true, ClientCAFile: pki.clientCA}, serverTLS)
	require.ErrorContains(t, err, "client_cert_file")
}
