package api

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// NewListener wraps the API's listener so that a new connection waits as an idle one until its
// first byte arrives, and only then goes to the http.Server.
//
// net/http starts ReadHeaderTimeout when it accepts a connection, so a connection that a
// client opened ahead of need is closed after 5 s without a request. Go's Transport does
// exactly that under a burst: a connection it dialed for a request that another connection
// served meanwhile waits in its idle pool. When the client later sends a POST on it just as
// the server closes it, the request fails ("http: server closed idle connection", or EOF)
// and, not being idempotent, is not sent again. Held here until readable, such a connection
// gets the server's IdleTimeout, as a kept-alive one does after its first request, and its
// request gets the whole ReadHeaderTimeout once it starts. A client that never sends
// anything is closed after idle, the time an idle kept-alive connection is kept anyway.
//
// The first byte is peeked (MSG_PEEK), not read: the connection reaches the server as
// accepted, with its type (TLS is layered above this listener by ServeTLS). Under TLS the wait
// ends with the ClientHello, which clients send at once, so a TLS connection opened ahead of
// need still meets ReadHeaderTimeout after its handshake. Waiting past the handshake would
// mean peeking below a tls.Conn that may already hold the request's first record.
func NewListener(inner net.Listener, idle time.Duration) net.Listener {
	l := &idleListener{Listener: inner, idle: idle, ready: make(chan net.Conn),
		failed: make(chan error), done: make(chan struct{}), waiting: map[net.Conn]struct{}{}}
	go l.acceptLoop()
	return l
}

type idleListener struct {
	net.Listener
	idle   time.Duration
	ready  chan net.Conn // connections that became readable
	failed chan error    // errors of the inner Accept, handed on one at a time
	done   chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool
	waiting map[net.Conn]struct{}
}

// Accept returns the next connection that has data to read.
func (l *idleListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.failed:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the inner listener and the connections still waiting for their first byte.
func (l *idleListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	for c := range l.waiting {
		_ = c.Close()
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// acceptLoop accepts until the inner listener is closed. An Accept error waits until the
// server's Accept takes it, so the server's backoff on temporary errors paces this loop too.
func (l *idleListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.failed <- err:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !l.track(c) {
			_ = c.Close()
			return
		}
		go l.await(c)
	}
}

// track records c as waiting; false once the listener is closed.
func (l *idleListener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.waiting[c] = struct{}{}
	return true
}

// await hands c to Accept once it is readable, or closes it: idle, closed by the client, or
// the listener closed.
func (l *idleListener) await(c net.Conn) {
	err := waitReadable(c, time.Now().Add(l.idle))
	l.mu.Lock()
	delete(l.waiting, c)
	l.mu.Unlock()
	if err != nil {
		_ = c.Close()
		return
	}
	select {
	case l.ready <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// waitReadable blocks until c has a byte to read (left unread) or deadline passes. A
// connection that cannot be peeked at is readable as far as it knows.
func waitReadable(c net.Conn, deadline time.Time) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return err
	}
	var (
		buf   [1]byte
		recvd error
	)
	err = raw.Read(func(fd uintptr) bool {
		n, _, e := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
		switch {
		case e == syscall.EAGAIN || e == syscall.EINTR:
			return false // not readable yet: the poller waits, within the deadline
		case e != nil:
			recvd = e
		case n == 0:
			recvd = io.EOF // closed by the client without a request
		}
		return true
	})
	if err != nil {
		return err
	}
	if recvd != nil {
		return recvd
	}
	return c.SetReadDeadline(time.Time{})
}
