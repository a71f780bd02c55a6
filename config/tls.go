package config

import (
	"errors"
	"os"
	"strings"
)

// TLS configures HTTPS on the API and the client side of workers and orchctl.
type TLS struct {
	// CertFile and KeyFile are the API's certificate and key (ORCH_TLS_CERT, ORCH_TLS_KEY); when
	// both are set the API serves HTTPS only.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile verifies client certificates presented to the API (ORCH_TLS_CLIENT_CA).
	ClientCAFile string `yaml:"client_ca_file"`
	// RequireWorkerCert makes the worker routes (/internal/*) refuse a request without a
	// client certificate verified by ClientCAFile, in addition to the worker token
	// (ORCH_TLS_REQUIRE_WORKER_CERT=true).
	RequireWorkerCert bool `yaml:"require_worker_cert"`
	// CAFile is the CA a client (worker, orchctl) trusts for the API's certificate
	// (ORCH_TLS_CA; default: the system roots).
	CAFile string `yaml:"ca_file"`
	// ClientCertFile and ClientKeyFile are the certificate a worker presents to the API
	// (ORCH_TLS_CLIENT_CERT, ORCH_TLS_CLIENT_KEY).
	ClientCertFile string `yaml:"client_cert_file"`
	ClientKeyFile  string `yaml:"client_key_file"`
}

// Enabled reports whether the API serves HTTPS.
func (t TLS) Enabled() bool { return t.CertFile != "" && t.KeyFile != "" }

func (t *TLS) applyEnv(getenv func(string) string) {
	for key, dst := range map[string]*string{
		"ORCH_TLS_CERT":        &t.CertFile,
		"ORCH_TLS_KEY":         &t.KeyFile,
		"ORCH_TLS_CLIENT_CA":   &t.ClientCAFile,
		"ORCH_TLS_CA":          &t.CAFile,
		"ORCH_TLS_CLIENT_CERT": &t.ClientCertFile,
		"ORCH_TLS_CLIENT_KEY":  &t.ClientKeyFile,
	} {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	if v := strings.ToLower(getenv("ORCH_TLS_REQUIRE_WORKER_CERT")); v == "1" || v == "true" {
		t.RequireWorkerCert = true
	}
}

// validate checks that paired files come in pairs and every named file exists.
func (t TLS) validate() error {
	var errs []error
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("config: tls.cert_file and tls.key_file go together"))
	}
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		errs = append(errs, errors.New("config: tls.client_cert_file and tls.client_key_file go together"))
	}
	if t.RequireWorkerCert && (t.ClientCAFile == "" || !t.Enabled()) {
		errs = append(errs, errors.New("config: tls.require_worker_cert needs tls.cert_file, tls.key_file and tls.client_ca_file"))
	}
	for key, path := range map[string]string{
		"cert_file": t.CertFile, "key_file": t.KeyFile, "client_ca_file": t.ClientCAFile, "ca_file": t.CAFile,
		"client_cert_file": t.ClientCertFile, "client_key_file": t.ClientKeyFile,
	} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, errors.New("config: tls."+key+": "+err.Error()))
		}
	}
	return errors.Join(errs...)
}
