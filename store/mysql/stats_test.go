package mysql_test

import (
	"testing"

	"github.com/gpuorch/orchestrator/internal/testenv"
	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/store/storetest"
)

func TestStats(t *testing.T) {
	t.Parallel()
	storetest.RunStats(t, func(t *testing.T) store.Store { return testenv.MySQLStore(t) })
}
