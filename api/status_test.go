package api

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/engine"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

type fakeLeader struct{ state store.LeaderState }

func (f fakeLeader) IsLeader() bool { return true }
func (f fakeLeader) Term() int64    { return f.state.Term }
func (f fakeLeader) Leader(context.Context) (store.LeaderState, error) {
	return f.state, nil
}

func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	since := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	b.srv = New(b.with(Options{
		Auth: AuthOptions{Tokens: b.srv.auth.Tokens}, Logger: slog.New(slog.DiscardHandler),
		Leader: fakeLeader{store.LeaderState{Term: 7, LeaderID: "orch-a", AcquiredAt: since, RenewedAt: since}},
	}))
	b.submitJob(t, "alice")
	_, _, err := b.eng.Submit(t.Context(), engine.SubmitParams{Type: "sleep", Agent: "alice", Payload: []byte(`{"ms":1}`)})
	require.NoError(t, err)
	b.eng.FlushMarks(t.Context()) // the publishes that follow the answers

	rec := b.request(t, http.MethodGet, "/status", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	st := decode[wire.Status](t, rec)
	require.True(t, st.ThisInstanceLeads)
	require.Equal(t, &wire.StatusLeader{LeaderID: "orch-a", Term: 7, Since: since, RenewedAt: since}, st.Leader)
	require.Empty(t, st.Errors)
	lengths := map[string]int64{}
	for _, q := range st.Queues {
		lengths[q.Type] = q.Length
	}
	require.EqualValues(t, 1, lengths["noop"])
	require.EqualValues(t, 1, lengths["sleep"])
	require.Len(t, st.Queues, len(b.cfg.JobTypes))

	require.Equal(t, http.StatusUnauthorized, b.request(t, http.MethodGet, "/status", "", nil).Code)
}
