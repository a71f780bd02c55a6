// Package hookurl holds the rules of the URLs the orchestrator itself calls: webhook
// endpoints, job callbacks and pre-run hooks (docs/security.md, "Webhooks"). An agent or an
// admin names such a URL and the orchestrator calls it from inside the cluster's network, so
// without rules a URL could reach what only the cluster can: a database, a metadata service,
// the orchestrator's own API. The rules are checked twice: on the URL when it is given (Check),
// and on the address actually dialled (Control), which also catches a DNS name that resolves
// to a private address, or is made to later.
//
// It is a leaf: the engine, the API and the webhooks package share it.
package hookurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// MaxBytes is the longest URL accepted (the columns that keep them hold 2048 bytes).
const MaxBytes = 2048

// resolveTimeout bounds the lookup of a name by CheckResolved.
const resolveTimeout = 2 * time.Second

// BlockedError says that an address is not public: loopback, private, link-local,
// unspecified, multicast or reserved.
type BlockedError struct {
	Addr netip.Addr
	// Name is the host name that resolved to Addr ("" for an address given as such).
	Name string
}

func (e *BlockedError) Error() string {
	what := "address " + e.Addr.String()
	if e.Name != "" {
		what = fmt.Sprintf("%q resolves to %s, which", e.Name, e.Addr)
	}
	return what + " is loopback, private, link-local or otherwise not public; an admin may allow such " +
		"addresses with webhooks.allow_private"
}

// notPublic are the IPv4 and IPv6 ranges a hook may not reach (besides what netip's own
// predicates name): the cluster's own networks, and addresses that are not a host's.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT, often a cloud's internal network
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use IPv4/IPv6 translation
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated
}

// nat64 is the well-known NAT64 prefix: its addresses reach the IPv4 address in their last
// four bytes, which is checked instead.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Blocked reports whether a hook may not reach ip: loopback, private (10/8, 172.16/12,
// 192.168/16, fc00::/7), link-local (169.254/16, fe80::/10, where cloud metadata services
// live), unspecified, multicast, or one of the other ranges that are not a public host's.
func Blocked(ip netip.Addr) bool {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return true
	}
	for _, p := range notPublic {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Check parses raw as a hook URL and checks what can be checked without the network: an
// absolute http or https URL of printable ASCII, at most MaxBytes, with a host and a valid
// port; unless allowPrivate, a host that is not a blocked address (Blocked) nor localhost.
// Its error says what is wrong in words fit for a 400's message.
func Check(raw string, allowPrivate bool) (*url.URL, error) {
	switch {
	case raw == "":
		return nil, errors.New("is empty")
	case len(raw) > MaxBytes:
		return nil, fmt.Errorf("is %d bytes, over the limit of %d", len(raw), MaxBytes)
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] <= ' ' || raw[i] > '~' {
			return nil, errors.New("must be printable ASCII without spaces: percent-encode the rest, and write an " +
				"international domain name in its xn-- form")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %s", strings.TrimPrefix(err.Error(), "parse "+fmt.Sprintf("%q", raw)+": "))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("must be an http or https URL, not %q", u.Scheme)
	}
	host := u.Hostname()
	if host == "" || u.Opaque != "" {
		return nil, errors.New("names no host")
	}
	if p := u.Port(); p != "" {
		if _, err := netip.ParseAddrPort("0.0.0.0:" + p); err != nil || p == "0" {
			return nil, fmt.Errorf("has an invalid port %q", p)
		}
	}
	if allowPrivate {
		return u, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if Blocked(ip) {
			return nil, &BlockedError{Addr: ip}
		}
		return u, nil
	}
	if name := strings.TrimSuffix(strings.ToLower(host), "."); name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return nil, fmt.Errorf("names %q, a loopback name; an admin may allow private addresses with webhooks.allow_private", host)
	}
	return u, nil
}

// Resolver looks names up (*net.Resolver has it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckResolved looks up the host of u (a name; an address was checked by Check) and refuses
// it when any of its addresses is blocked. A name that does not resolve now is not refused:
// the check at dial time (Control) guards every call anyway.
func CheckResolved(ctx context.Context, r Resolver, u *url.URL) error {
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if Blocked(a) {
			return &BlockedError{Addr: a, Name: host}
		}
	}
	return nil
}

// Control is the net.Dialer Control of the hooks' HTTP client: it refuses a connection to a
// blocked address, unless allowPrivate, after the name was resolved and before the connection
// is made, so a name that resolves to a private address cannot be used to reach it.
func Control(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial %s: not an address: %w", address, err)
		}
		if Blocked(ap.Addr()) {
			return &BlockedError{Addr: ap.Addr()}
		}
		return nil
	}
}

// IsBlocked reports whether err says a URL or an address was refused by these rules.
func IsBlocked(err error) bool {
	var b *BlockedError
	return errors.As(err, &b)
}

// Dialer is the dialer of the hooks' HTTP client: connectTimeout, and Control.
func Dialer(connectTimeout time.Duration, allowPrivate bool) *net.Dialer {
	return &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second, Control: Control(allowPrivate)}
}
