package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Signatures (docs/security.md, "Webhooks"): every request the orchestrator sends to a hook
// carries X-Orchestrator-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">, keyed
// with the endpoint's secret as the bytes of its text. The timestamp is signed with the body,
// so a receiver that refuses old timestamps cannot be replayed an old request.

// Secret prefixes: a subscription's secret, an agent's callback secret.
const (
	subscriptionSecretPrefix = "whsec_"
	callbackSecretPrefix     = "whcb_"
)

// ToleranceDefault is how far from the receiver's clock a signature's time may be
// (VerifySignature).
const ToleranceDefault = 5 * time.Minute

// Sign returns the X-Orchestrator-Signature value of body signed at t with secret.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

// mac is the hex HMAC-SHA256 of "<ts>.<body>" keyed with secret.
func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// ErrSignature is the error of a signature that does not verify.
var ErrSignature = errors.New("webhook signature does not verify")

// VerifySignature checks an X-Orchestrator-Signature header value against body and secret:
// one of its v1 values must be the body's HMAC, and its t within tolerance of now. It is what
// a receiver written in Go runs (docs/security.md shows the same in a few lines).
func VerifySignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var (
		ts   string
		sigs []string
	)
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want t=<unix>,v1=<hex>", ErrSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now", ErrSignature, d.Round(time.Second))
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return ErrSignature
}

// NewSecret returns a fresh subscription secret: 256 random bits.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return subscriptionSecretPrefix + hex.EncodeToString(b[:])
}

// CallbackSecret is the key of agent's job callbacks: derived from the cluster's
// webhooks.callback_secret and the agent's name, so that every agent's receivers hold a key of
// their own (one agent's cannot sign what another's accepts), and rotating the cluster secret
// rotates them all. "" when the cluster has none.
func CallbackSecret(clusterSecret, agent string) string {
	if clusterSecret == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(clusterSecret))
	m.Write([]byte("callback:" + agent))
	return callbackSecretPrefix + hex.EncodeToString(m.Sum(nil))
}
