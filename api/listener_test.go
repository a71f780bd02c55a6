package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serveIdle serves a 200 on every path through NewListener(idle), with the given
// ReadHeaderTimeout, and returns the address.
func serveIdle(t *testing.T, idle, readHeader time.Duration) string {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := NewHTTPServer("", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	hs.ReadHeaderTimeout = readHeader
	ln := NewListener(inner, idle)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return inner.Addr().String()
}

// get sends one request on c and returns the status line of the answer.
func get(t *testing.T, c net.Conn) (string, error) {
	t.Helper()
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: api\r\n\r\n"); err != nil {
		return "", err
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	_ = resp.Body.Close()
	return resp.Status, nil
}

// TestListenerKeepsUnusedConnections: a connection opened ahead of need (as Go's Transport
// does under a burst) still serves a request sent after the server's ReadHeaderTimeout. Without
// the listener the server closes it at that timeout and the request gets EOF.
func TestListenerKeepsUnusedConnections(t *testing.T) {
	t.Parallel()
	addr := serveIdle(t, 10*time.Second, 200*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	time.Sleep(600 * time.Millisecond) // three times ReadHeaderTimeout, unused
	status, err := get(t, c)
	require.NoError(t, err, "the server closed a connection that had not sent its first request yet")
	require.Equal(t, "200 OK", status)

	// The request, once started, still has ReadHeaderTimeout for its headers.
	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, "GET /x HTTP/1.1\r\n")
	require.NoError(t, err)
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = slow.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "headers that never end are cut off by the server")
}

// TestListenerClosesIdleConnections: a connection that sends nothing is closed after the idle
// time, and one that the client closes is dropped without reaching the server.
func TestListenerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	addr := serveIdle(t, 300*time.Millisecond, time.Second)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	// The server closes it (EOF); a listener that kept it would let the read time out instead.
	// The deadline is far above the idle time so that a loaded machine cannot fail the test.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)

	gone, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, gone.Close())
	ok, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer ok.Close()
	status, err := get(t, ok)
	require.NoError(t, err)
	require.Equal(t, "200 OK", status)
}

// TestListenerShutdown: Shutdown closes the listener, and the connections still waiting for
// their first byte with it; Serve returns ErrServerClosed.
func TestListenerShutdown(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := NewHTTPServer("", http.NotFoundHandler())
	ln := NewListener(inner, time.Minute).(*idleListener)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	c, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.Eventually(t, func() bool { // accepted, waiting for its first byte
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return len(ln.waiting) == 1
	}, 5*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, hs.Shutdown(ctx))
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the waiting connection is closed with the listener")
}
