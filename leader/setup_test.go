package leader_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leader"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/mysql"
)

// testInterval is the election interval of most tests: short, so that takeovers are quick.
const testInterval = 50 * time.Millisecond

// waitMax bounds every wait of the tests: far above what any step needs, far below a hang.
const waitMax = 10 * time.Second

// bundle is one test's database: its DSN, a store on it, and a lock name no other test uses
// (lock names are server-wide, the database name is unique).
type bundle struct {
	dsn      string
	dbName   string
	st       *mysql.Store
	raw      *sql.DB // for the tests' own statements (KILL, lock waits)
	lockName string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	st, err := mysql.Open(t.Context(), dsn, mysql.Options{MaxOpenConns: 10})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	b := &bundle{dsn: dsn, dbName: cfg.DBName, st: st, lockName: "orch_leader_" + cfg.DBName}
	b.raw = b.openDB(t)
	return b
}

// openDB opens a separate connection pool, as another orchestrator process would have.
func (b *bundle) openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", b.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newMySQL returns a MySQLElector with its own pool, stopped at cleanup, and the recorder of
// its OnElected calls.
func (b *bundle) newMySQL(t *testing.T, id string, interval time.Duration) (*leader.MySQLElector, *recorder) {
	t.Helper()
	rec := newRecorder()
	e, err := leader.NewMySQL(b.openDB(t), b.st, leader.Config{
		LockName: b.lockName, ID: id, Interval: interval, OnElected: rec.onElected, Logger: testLogger(t),
	})
	require.NoError(t, err)
	t.Cleanup(e.Stop)
	return e, rec
}

// auditEvents returns the leadership audit rows, oldest first.
func (b *bundle) auditEvents(t *testing.T) []store.AuditEvent {
	t.Helper()
	events, err := b.st.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	require.NoError(t, err)
	return events
}

// requireAudit checks that the leadership audit holds exactly want (event type and actor),
// in order, and returns the rows' details.
func (b *bundle) requireAudit(t *testing.T, want ...string) []map[string]any {
	t.Helper()
	events := b.auditEvents(t)
	var got []string
	var details []map[string]any
	for _, ev := range events {
		got = append(got, ev.EventType+" "+ev.Actor)
		var d map[string]any
		require.NoError(t, json.Unmarshal(ev.Details, &d))
		details = append(details, d)
	}
	require.Equal(t, want, got)
	return details
}

// election is one OnElected call.
type election struct {
	term     int64
	ctx      context.Context
	returned chan struct{} // closed when OnElected returns
}

// recorder is an OnElected that reports every call on a channel and, like real leader-only
// work, runs until its context ends.
type recorder struct {
	elected chan election
}

func newRecorder() *recorder { return &recorder{elected: make(chan election, 16)} }

func (r *recorder) onElected(ctx context.Context, term int64) {
	el := election{term: term, ctx: ctx, returned: make(chan struct{})}
	r.elected <- el
	<-ctx.Done()
	close(el.returned)
}

// next waits for the next election.
func (r *recorder) next(t *testing.T) election {
	t.Helper()
	select {
	case el := <-r.elected:
		return el
	case <-time.After(waitMax):
		t.Fatal("no election")
		return election{}
	}
}

// requireNone checks that no election happened (so far).
func (r *recorder) requireNone(t *testing.T) {
	t.Helper()
	select {
	case el := <-r.elected:
		t.Fatalf("unexpected election, term %d", el.term)
	default:
	}
}

// requireDone waits for ctx to end.
func requireDone(t *testing.T, ctx context.Context, msg string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(waitMax):
		t.Fatal(msg)
	}
}

// requireClosed waits for ch to be closed.
func requireClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitMax):
		t.Fatal(msg)
	}
}

// waitRenewals waits until the leader of term has renewed leader_state n more times: n of
// its election steps have passed (and as many of every follower's).
func (b *bundle) waitRenewals(t *testing.T, term int64, n int, each func()) {
	t.Helper()
	last := time.Time{}
	seen := -1
	require.Eventually(t, func() bool {
		ls, err := b.st.LeaderGet(t.Context())
		require.NoError(t, err)
		require.Equal(t, term, ls.Term, "the term changed")
		if each != nil {
			each()
		}
		if !ls.RenewedAt.Equal(last) {
			last = ls.RenewedAt
			seen++
		}
		return seen >= n
	}, waitMax, 5*time.Millisecond)
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
