package api

import (
	"database/sql"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
)

// TestSQLiteLockedIs503 checks that a write the SQLite database refuses because another
// process holds its lock is answered 503 unavailable, as MariaDB's lock wait timeout is, not
// 500: the store marks it store.ErrUnavailable and the API maps the sentinel.
func TestSQLiteLockedIs503(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), sqlite.DBFileName)
	_, _, err := db.MigrateSQLite(t.Context(), path, db.CmdUp, nil)
	require.NoError(t, err)
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{BusyTimeout: time.Millisecond, TxRetries: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	b := newBundle(t, st, streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)}))

	// Another process (a second connection pool on the file, an operator's sqlite3 shell)
	// holds the write lock.
	other, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	require.NoError(t, err)

	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", `{"type":"noop","agent":"alice","payload":{}}`)
	d := requireError(t, rec, http.StatusServiceUnavailable, CodeUnavailable, "")
	require.NotContains(t, d.Message, "SQLITE", "the driver's words stay in the log")

	_, err = conn.ExecContext(t.Context(), "ROLLBACK")
	require.NoError(t, err)
	rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", `{"type":"noop","agent":"alice","payload":{}}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
}
