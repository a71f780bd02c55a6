// Package embedredis runs the embedded mode's Redis inside the orchestrator process
// (github.com/alicebob/miniredis/v2), on a fixed loopback port so that local worker processes
// can connect to it like to any Redis. Nothing has to be installed.
//
// It keeps nothing on disk: every start begins with empty streams. That is sound because the
// database is the truth and a stream entry only a delivery: at start the embedded mode
// re-publishes every job that is not finished (engine.RecoverRedis), exactly what happens after a real
// Redis lost its data. To let that detection work unchanged, the server answers INFO server
// with a run_id of its own, new at every start, which miniredis alone does not (see below).
//
// # What miniredis does not do like Redis 7
//
// Checked against miniredis v2.40.0 for every command package streams uses. The embedded mode
// must not depend on these:
//
//   - XAUTOCLAIM never reports deleted ids (its third reply element is always empty), and a
//     pending entry whose stream entry was deleted stays in the pending list for good instead
//     of being dropped. Streams must therefore never lose entries that are still pending:
//     streams.TrimUnneeded only trims below the oldest pending or unread entry, which keeps
//     that true; a consumer must not XDEL entries of a group stream either.
//   - XINFO GROUPS reports lag as the stream's length and entries-read as nil. Nothing may
//     take that lag as is: streams.GroupStats counts the entries after the last delivered id
//     when the reported lag cannot be trusted.
//     It reports the last-delivered-id of a group that never delivered an entry as "0" (Redis:
//     "0-0"); whatever parses it must take both.
//   - XPENDING's summary leaves out pending entries whose stream entry was deleted (Redis
//     counts them); with the rule above there are none.
//   - XCLAIM ... JUSTID increments the delivery counter (Redis leaves it alone). Nothing reads
//     the counter.
//   - INFO supports only the clients and stats sections. INFO server, whose run_id tells the
//     orchestrator that Redis restarted (and may have lost data), is answered by this package
//     (infoServerHook): the run_id is random per Start, so every start of the embedded mode is
//     seen as a new, empty server and every unfinished job is published again. Only the
//     explicit "INFO server" form is answered, and not queued inside MULTI.
//   - Streams are plain slices: reads past the start and trims cost time linear in the
//     stream's length, so streams must be trimmed (the leader's trimmer does it).
//
// XADD, XREADGROUP (with BLOCK, several streams), XACK, XGROUP CREATE ... MKSTREAM, XLEN,
// XTRIM MINID, EVAL/EVALSHA (Lua) and pipelines behave as with Redis for what the
// orchestrator uses; the package tests run the streams client against it.
package embedredis

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// Server is a running in-process Redis.
type Server struct {
	mr    *miniredis.Miniredis
	runID string
}

// Start listens on addr, which must be a loopback host:port: the server has no password, so
// it must not be reachable from other hosts. Port 0 picks a free port (tests).
func Start(addr string) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("start embedded redis: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("start embedded redis: address %s is not a loopback address: "+
			"the embedded Redis has no password and must only be reachable from this host", addr)
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("start embedded redis: %s is in use by another process "+
				"(set ORCH_EMBEDDED_REDIS_ADDR to a free loopback port): %w", addr, err)
		}
		return nil, fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	var b [20]byte
	_, _ = rand.Read(b[:])
	s := &Server{mr: mr, runID: hex.EncodeToString(b[:])}
	mr.Server().SetPreHook(s.infoServerHook)
	return s, nil
}

// infoServerHook answers INFO server, which miniredis does not support, with the fields the
// orchestrator reads (run_id); every other command goes on to miniredis.
func (s *Server) infoServerHook(c *server.Peer, cmd string, args ...string) bool {
	if cmd != "INFO" || len(args) != 1 || !strings.EqualFold(args[0], "server") {
		return false
	}
	c.WriteBulk("# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\n" +
		"executable:embedded (miniredis)\r\nrun_id:" + s.runID + "\r\n" +
		"tcp_port:" + s.mr.Port() + "\r\n")
	return true
}

// RunID returns the run_id INFO server reports: random, new at every Start.
func (s *Server) RunID() string { return s.runID }

// Addr returns the host:port the server listens on.
func (s *Server) Addr() string { return s.mr.Addr() }

// Close stops the server and drops its connections and data. Close the clients first, so that
// they do not log the dropped connections.
func (s *Server) Close() { s.mr.Close() }
