package sqlite_test

import (
	"testing"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/sqlite"
	"github.com/gpuorch/orchestrator/store/storetest"
)

func TestStats(t *testing.T) {
	t.Parallel()
	storetest.RunStats(t, func(t *testing.T) store.Store {
		s, _ := setup(t, sqlite.Options{})
		return s
	})
}
