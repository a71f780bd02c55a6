package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gpuorch/orchestrator/internal/hookurl"
	"github.com/gpuorch/orchestrator/wire"
)

// Limits of one call to a hook.
const (
	// answerReadMax is how much of an answer is read: enough for an error message; the rest
	// is drained up to answerDrainMax so the connection can be reused, then dropped.
	answerReadMax  = 4 << 10
	answerDrainMax = 64 << 10
	// messageMax caps the text of an answer kept as an attempt's error or a job's error.
	messageMax = 1024
	// userAgent names the orchestrator in the hooks' logs.
	userAgent = "gpu-orchestrator-webhooks/1"
)

// ClientConfig configures the HTTP client of the hooks.
type ClientConfig struct {
	// ConnectTimeout bounds the dial and the TLS handshake; Timeout the whole call.
	ConnectTimeout, Timeout time.Duration
	// AllowPrivate lets it dial loopback, private and link-local addresses
	// (webhooks.allow_private); otherwise such a dial fails (hookurl.Control), whatever name
	// resolved to it.
	AllowPrivate bool
}

// NewClient returns the HTTP client of the hooks: every dial checked against the URL rules,
// no proxy (a proxy would dial for it, unchecked), no redirect followed (a 3xx is a failed
// attempt: a redirect could lead to a private address), short timeouts.
func NewClient(c ClientConfig) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           hookurl.Dialer(c.ConnectTimeout, c.AllowPrivate).DialContext,
		TLSHandshakeTimeout:   c.ConnectTimeout,
		ResponseHeaderTimeout: c.Timeout,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   c.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// call is one request to a hook.
type call struct {
	url, secret, key, event string
	body                    []byte
	now                     time.Time
}

// answer is what came of a call: the HTTP status (0 when none came), the start of the
// answer's body, and the error of a call that got no answer.
type answer struct {
	status int
	text   string
	err    error
	took   time.Duration
}

// ok reports whether the hook took the call (2xx).
func (a answer) ok() bool { return a.err == nil && a.status >= 200 && a.status < 300 }

// problem says what went wrong, for an attempt's error: "" for a 2xx.
func (a answer) problem() string {
	switch {
	case a.err != nil:
		return clip(a.err.Error())
	case a.ok():
		return ""
	case a.text != "":
		return clip(fmt.Sprintf("HTTP %d: %s", a.status, a.text))
	}
	return fmt.Sprintf("HTTP %d", a.status)
}

// post sends c, signed, and reads the start of the answer.
func post(ctx context.Context, hc *http.Client, c call) answer {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return answer{err: errors.New("invalid URL")}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", userAgent)
	h.Set(wire.HeaderIdempotencyKey, c.key)
	h.Set(wire.HeaderEvent, c.event)
	h.Set(wire.HeaderTimestamp, strconv.FormatInt(c.now.Unix(), 10))
	h.Set(wire.HeaderSignature, Sign(c.secret, c.now, c.body))
	resp, err := hc.Do(req)
	if err != nil {
		return answer{err: callError(err), took: time.Since(start)}
	}
	defer func() { _ = resp.Body.Close() }()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, answerReadMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, answerDrainMax))
	return answer{status: resp.StatusCode, text: printable(head), took: time.Since(start)}
}

// callError is a failed call's error without its URL, which may carry credentials in its
// userinfo or query: *url.Error's text names it.
func callError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return errors.New("timed out")
		}
		return ue.Err
	}
	return err
}

// printable is b as one line of printable text, trimmed.
func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, string(bytes.ToValidUTF8(b, nil)))
	return strings.TrimSpace(s)
}

// clip cuts s to messageMax bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= messageMax {
		return s
	}
	cut := messageMax
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
