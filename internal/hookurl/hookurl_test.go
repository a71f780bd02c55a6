package hookurl_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/hookurl"
)

func TestBlocked(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"127.0.0.1", "127.9.9.9", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "0.0.0.0", "0.1.2.3", "100.64.0.1", "224.0.0.1", "255.255.255.255", "240.0.0.1", "198.18.0.1",
		"::", "::1", "fe80::1", "fe80::1%eth0", "fd00:ec2::254", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"64:ff9b::7f00:1", "64:ff9b::a00:1"} {
		require.True(t, hookurl.Blocked(netip.MustParseAddr(a)), "%s is blocked", a)
	}
	for _, a := range []string{"1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1",
		"64:ff9b::101:101"} {
		require.False(t, hookurl.Blocked(netip.MustParseAddr(a)), "%s is public", a)
	}
	require.True(t, hookurl.Blocked(netip.Addr{}), "the zero address")
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"https://hooks.example.com/x?y=1", "http://1.1.1.1:8080/", "https://[2606:4700::1111]/h",
		"HTTPS://Example.COM/"} {
		u, err := hookurl.Check(ok, false)
		require.NoError(t, err, ok)
		require.NotEmpty(t, u.Host)
	}
	for raw, want := range map[string]string{
		"":                              "empty",
		"ftp://example.com/":            "http or https",
		"example.com/hook":              "http or https",
		"http:///path":                  "no host",
		"http:opaque":                   "no host",
		"https://exa mple.com/":         "printable ASCII",
		"https://exämple.com/":          "printable ASCII",
		"https://example.com:99999/":    "invalid port",
		"https://example.com:0/":        "invalid port",
		"http://127.0.0.1:8080/":        "loopback, private",
		"http://[::1]/":                 "loopback, private",
		"http://169.254.169.254/latest": "loopback, private",
		"http://10.0.0.7/":              "loopback, private",
		"http://localhost:9000/":        "loopback name",
		"http://api.LOCALHOST./":        "loopback name",
		"http://" + strings.Repeat("a", hookurl.MaxBytes) + ".com/": "over the limit",
	} {
		_, err := hookurl.Check(raw, false)
		require.ErrorContains(t, err, want, raw)
	}
	// allow_private lets the cluster's own addresses in, never a URL that is not one.
	for _, raw := range []string{"http://127.0.0.1:8080/", "http://localhost/", "http://10.0.0.7/"} {
		_, err := hookurl.Check(raw, true)
		require.NoError(t, err, raw)
	}
	_, err := hookurl.Check("ftp://127.0.0.1/", true)
	require.Error(t, err)
	_, err = hookurl.Check("http://127.0.0.1/", false)
	require.True(t, hookurl.IsBlocked(err))
}

// fakeResolver answers every name with addrs.
type fakeResolver struct {
	addrs []netip.Addr
	err   error
}

func (r fakeResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r.addrs, r.err
}

func TestCheckResolved(t *testing.T) {
	t.Parallel()
	u, err := hookurl.Check("https://rebind.example.com/x", false)
	require.NoError(t, err)
	err = hookurl.CheckResolved(t.Context(), fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("1.1.1.1"),
		netip.MustParseAddr("10.0.0.1")}}, u)
	require.ErrorContains(t, err, `"rebind.example.com" resolves to 10.0.0.1`)
	require.True(t, hookurl.IsBlocked(err))
	require.NoError(t, hookurl.CheckResolved(t.Context(), fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("1.1.1.1")}}, u))
	require.NoError(t, hookurl.CheckResolved(t.Context(), fakeResolver{err: errors.New("no such host")}, u),
		"a name that does not resolve now is left to the dial-time check")
}

func TestControl(t *testing.T) {
	t.Parallel()
	refuse := hookurl.Control(false)
	require.True(t, hookurl.IsBlocked(refuse("tcp", "127.0.0.1:80", nil)))
	require.True(t, hookurl.IsBlocked(refuse("tcp6", "[::1]:443", nil)))
	require.NoError(t, refuse("tcp", "1.1.1.1:443", nil))
	require.Error(t, refuse("tcp", "nonsense", nil))
	require.NoError(t, hookurl.Control(true)("tcp", "127.0.0.1:80", nil))
}
