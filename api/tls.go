package api

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"

	"github.com/gin-gonic/gin"

	"github.com/gpuorch/orchestrator/config"
)

// ServerTLS returns the API's TLS configuration, or nil when TLS is off. With a client CA, a
// client certificate is verified when one is presented (worker routes may require one, see
// requireWorkerCert); agents and operators keep using tokens alone.
func ServerTLS(t config.TLS) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load the API certificate: %w", err)
	}
	out := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if t.ClientCAFile != "" {
		pool, err := certPool(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("load the client CA: %w", err)
		}
		out.ClientCAs = pool
		out.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return out, nil
}

func certPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// requireWorkerCert refuses a worker route without a verified client certificate (403), when
// tls.require_worker_cert is set: a stolen worker token alone is then not enough.
func (s *Server) requireWorkerCert(c *gin.Context) {
	if !s.cfg.TLS.RequireWorkerCert {
		c.Next()
		return
	}
	if c.Request.TLS == nil || len(c.Request.TLS.VerifiedChains) == 0 {
		s.writeError(c, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
			Message: "worker routes need a client certificate signed by the configured client CA"})
		c.Abort()
		return
	}
	c.Next()
}
