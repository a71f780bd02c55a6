package streams_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/streams"
)

func TestPreloads(t *testing.T) {
	t.Parallel()
	sc, _ := setup(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	want := streams.Preload{PoolID: "mistral", Agent: "chat", ModelID: "mistral-7b", Adapter: "vllm",
		Variant: "q4", Types: []string{"inference", "preload"}, DesiredWorkers: 2, At: at}
	id, err := sc.PublishPreload(t.Context(), want)
	require.NoError(t, err)
	_, err = sc.PublishPreload(t.Context(), streams.Preload{PoolID: "bare", At: at})
	require.NoError(t, err)

	got, err := sc.ListPreloads(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	want.ID = id
	require.Equal(t, want, got[0])
	require.Equal(t, "bare", got[1].PoolID)
	require.Nil(t, got[1].Types)

	// A preload entry is no job: read through a group it has no job id.
	require.NoError(t, sc.EnsureGroup(t.Context(), streams.PreloadsStream, streams.GroupName("preload")))
	ds := read(t, sc, streams.PreloadsStream, streams.GroupName("preload"), "c", 2)
	require.Empty(t, ds[0].JobID)
}
