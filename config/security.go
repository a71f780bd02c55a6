package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Defaults of the API's security settings.
const (
	// MaxStreamsPerTokenDefault is how many event streams (GET /events, GET /jobs/{id}/events)
	// one token may hold open at once: enough for a dashboard and a few job watchers, few
	// enough that one token cannot hold a database poller per connection without end.
	MaxStreamsPerTokenDefault = 16
	// MetricsTokenMinLen is the shortest metrics token accepted: a bearer secret that a
	// scraper sends on every scrape should not be guessable.
	MetricsTokenMinLen = 16
)

// Security are the API's security settings that are not tokens (those are in tokens_file).
type Security struct {
	// MaxStreamsPerToken caps the event streams one token holds open at once
	// (ORCH_MAX_STREAMS_PER_TOKEN); a stream over it is refused with 429.
	MaxStreamsPerToken int `yaml:"max_streams_per_token"`
	// MetricsToken, when set, is the bearer token GET /metrics requires (ORCH_METRICS_TOKEN);
	// admin tokens are accepted too. Empty: /metrics is open, as before.
	MetricsToken string `yaml:"metrics_token"`
	// MetricsTokenFile holds the metrics token (ORCH_METRICS_TOKEN_FILE), for secrets mounted
	// as files; it is read at load and its surrounding whitespace dropped.
	MetricsTokenFile string `yaml:"metrics_token_file"`
}

// applySecurityEnv applies the ORCH_* overrides of the security settings and reads the metrics
// token file.
func (c *Config) applySecurityEnv(getenv func(string) string) error {
	s := &c.Security
	if v := getenv("ORCH_MAX_STREAMS_PER_TOKEN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("config: ORCH_MAX_STREAMS_PER_TOKEN=%q: want a positive integer", v)
		}
		s.MaxStreamsPerToken = n
	}
	if v := getenv("ORCH_METRICS_TOKEN"); v != "" {
		s.MetricsToken = v
	}
	if v := getenv("ORCH_METRICS_TOKEN_FILE"); v != "" {
		s.MetricsTokenFile = v
	}
	if s.MetricsTokenFile == "" {
		return nil
	}
	if s.MetricsToken != "" {
		return fmt.Errorf("config: metrics_token and metrics_token_file are both set: keep one")
	}
	var err error
	s.MetricsToken, err = readSecretFile("metrics_token_file", s.MetricsTokenFile)
	return err
}

// readSecretFile reads a secret from the file at path (the setting key names), its surrounding
// whitespace dropped; an empty one is an error.
func readSecretFile(key, path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("config: %s: %w", key, err)
	}
	secret := strings.TrimSpace(string(raw))
	if secret == "" {
		return "", fmt.Errorf("config: %s %s is empty", key, path)
	}
	return secret, nil
}

func (s *Security) fillDefaults() {
	if s.MaxStreamsPerToken == 0 {
		s.MaxStreamsPerToken = MaxStreamsPerTokenDefault
	}
}

// validate checks the security settings.
func (s Security) validate() []error {
	var errs []error
	if s.MaxStreamsPerToken < 1 || s.MaxStreamsPerToken > 100000 {
		errs = append(errs, fmt.Errorf("config: max_streams_per_token must be in 1..100000, not %d", s.MaxStreamsPerToken))
	}
	if s.MetricsToken != "" {
		if len(s.MetricsToken) < MetricsTokenMinLen {
			errs = append(errs, fmt.Errorf("config: metrics_token must be at least %d characters", MetricsTokenMinLen))
		}
		if strings.ContainsFunc(s.MetricsToken, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			errs = append(errs, fmt.Errorf("config: metrics_token must not contain spaces or control characters"))
		}
	}
	return errs
}
