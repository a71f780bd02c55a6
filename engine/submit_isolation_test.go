package engine_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/config"
	"github.com/gpuorch/orchestrator/db"
	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/leases"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/streams"
)

// setupSQLite is setup on the embedded mode's store: a fresh SQLite file (no fsync per commit:
// the tests do not crash the machine) and the real Redis.
func setupSQLite(t *testing.T) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), sqlite.DBFileName)
	_, _, err := db.MigrateSQLite(t.Context(), path, db.CmdUp, nil)
	require.NoError(t, err)
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Synchronous: "OFF"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cfg, err := config.Load("", func(string) string { return "" })
	require.NoError(t, err)
	rdb := streams.NewRedis(testenv.RedisAddr(t), "")
	t.Cleanup(func() { _ = rdb.Close() })
	sc := streams.New(rdb, streams.Options{Prefix: testenv.RedisPrefix(t)})
	ck := &clock{now: time.Now().UTC().Truncate(time.Second)}
	lm := engine.NewLeaseManager(st, cfg, leases.Options{Now: ck.Now})
	eng := engine.New(st, sc, cfg, engine.Options{Now: ck.Now, Leases: lm})
	t.Cleanup(func() { eng.FlushMarks(context.Background()) }) // before the store closes
	return &bundle{eng: eng, leases: lm, store: st, streams: sc, clock: ck, cfg: cfg}
}

// badPayloads are payloads each store refuses, which a caller that vouches for its payload
// (PayloadChecked, as the API's decoder does) could let through: the group commit must fail
// their jobs alone.
var badPayloads = map[string]struct {
	setup   func(*testing.T) *bundle
	payload string
}{
	// MariaDB's utf8mb4 refuses invalid UTF-8 (Error 1366).
	"MariaDB": {setup, "{\"s\":\"\xff\"}"},
	// SQLite's json_valid CHECK refuses nesting past 1,000 levels.
	"SQLite": {setupSQLite, strings.Repeat("[", 1001) + strings.Repeat("]", 1001)},
}

// TestSubmitGroupFailsABadJobAlone: a batch [ok, bad, ok, …] whose transaction the bad job
// fails commits the others; the bad job alone gets an error. Before the fix, every job of the
// group failed with the database's error.
func TestSubmitGroupFailsABadJobAlone(t *testing.T) {
	t.Parallel()
	for name, c := range badPayloads {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := c.setup(t)
			// Two bad jobs among ten, and a batch past publishInTxMin (published in the
			// transaction) for both halvings.
			for _, n := range []int{3, 10, 70} {
				bad := map[int]bool{1: true}
				if n > 3 {
					bad[n-2] = true
				}
				ps := make([]engine.SubmitParams, n)
				for i := range ps {
					ps[i] = engine.SubmitParams{JobID: uid("iso"), Type: "noop", Agent: "tester",
						Payload: json.RawMessage(`{"ok":true}`), PayloadChecked: true, Actor: "agent:tester"}
					if bad[i] {
						ps[i].Payload = json.RawMessage(c.payload)
					}
				}
				out := b.eng.SubmitMany(ctx, ps)
				require.Len(t, out, n)
				for i, o := range out {
					if bad[i] {
						require.Error(t, o.Err, "job %d of %d", i, n)
						continue
					}
					require.NoError(t, o.Err, "job %d of %d: another job's data failed it", i, n)
					require.True(t, o.Created)
				}
				b.eng.FlushMarks(ctx)
				for i, p := range ps {
					got, err := b.store.JobGet(ctx, p.JobID)
					if bad[i] {
						require.ErrorIs(t, err, store.ErrNotFound, "nothing written for the bad job")
						continue
					}
					require.NoError(t, err)
					require.True(t, got.Enqueued, "job %d of %d", i, n)
					require.JSONEq(t, `{"ok":true}`, string(got.Payload))
				}
			}
		})
	}
}

// TestSubmitChecksPayloadsOfOtherCallers: a caller that does not vouch for its payload (not
// the API) has it checked as the API's decoder would: 400s naming the field, nothing written.
func TestSubmitChecksPayloadsOfOtherCallers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for payload, field := range map[string]string{
		"{\"s\":\"\xff\"}": "payload.s",
		`["\udc00"]`:       "payload[0]",
		`{"a":1,"a":2}`:    "payload.a",
		strings.Repeat("[", 600) + strings.Repeat("]", 600): "payload" + strings.Repeat("[0]", 20) + "…",
	} {
		_, _, err := b.eng.Submit(context.Background(), engine.SubmitParams{JobID: uid("chk"), Type: "noop",
			Agent: "tester", Payload: json.RawMessage(payload), Actor: "agent:tester"})
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve, "payload %.40q", payload)
		require.Equal(t, field, ve.Field)
	}
}

// TestResubmitMismatch checks, on both stores, that a resubmit of an existing id answers the
// job only for the same request, and a *MismatchError naming the first differing field
// otherwise.
func TestResubmitMismatch(t *testing.T) {
	t.Parallel()
	for name, setupStore := range map[string]func(*testing.T) *bundle{"MariaDB": setup, "SQLite": setupSQLite} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupStore(t)
			id := uid("idem")
			first := engine.SubmitParams{JobID: id, Type: "noop", Agent: "tester", Payload: json.RawMessage(`{"n":1,"big":12345678901234567890}`),
				MaxAttempts: 2, Actor: "agent:tester"}
			_, created, err := b.eng.Submit(ctx, first)
			require.NoError(t, err)
			require.True(t, created)

			same := first
			same.Payload = json.RawMessage(`{ "big" : 12345678901234567890, "n" : 1.0 }`)
			job, created, err := b.eng.Submit(ctx, same)
			require.NoError(t, err, "the same request, spelled otherwise")
			require.False(t, created)
			require.Equal(t, id, job.ID)
			same.MaxAttempts = 0 // left out: the type's default is not compared
			_, _, err = b.eng.Submit(ctx, same)
			require.NoError(t, err)

			for field, change := range map[string]func(*engine.SubmitParams){
				"type":         func(p *engine.SubmitParams) { p.Type = "sleep" },
				"payload":      func(p *engine.SubmitParams) { p.Payload = json.RawMessage(`{"n":1,"big":12345678901234567891}`) },
				"max_attempts": func(p *engine.SubmitParams) { p.MaxAttempts = 3 },
				"timeout":      func(p *engine.SubmitParams) { p.Timeout = time.Minute },
			} {
				p := first
				change(&p)
				out := b.eng.SubmitMany(ctx, []engine.SubmitParams{p})
				var mm *engine.MismatchError
				require.ErrorAs(t, out[0].Err, &mm, field)
				require.Equal(t, field, mm.Field)
				require.ErrorIs(t, out[0].Err, store.ErrConflict)
			}
			got, err := b.store.JobGet(ctx, id)
			require.NoError(t, err)
			require.JSONEq(t, string(first.Payload), string(got.Payload), "nothing changed")
		})
	}
}
