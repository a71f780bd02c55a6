package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// fakeProvider is a Provider whose snapshots and errors a test scripts. Each Snapshot returns
// the next error of errs while any are left, else a snapshot of gpus idle GPUs whose Taken is
// Unix(n) for the n-th call, so tests can tell snapshots apart.
type fakeProvider struct {
	name string
	gpus int

	mu     sync.Mutex
	errs   []error
	calls  int
	closed atomic.Int32
}

func (f *fakeProvider) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return Snapshot{}, err
	}
	snap := Snapshot{NodeID: "node-a", Taken: time.Unix(int64(f.calls), 0), GPUs: []GPU{}, Source: f.name}
	for i := range f.gpus {
		snap.GPUs = append(snap.GPUs, GPU{Index: i, MemoryTotalMB: 1000, MemoryFreeMB: 1000})
	}
	return snap, nil
}

func (f *fakeProvider) Name() string { return f.name }

func (f *fakeProvider) Close() error {
	f.closed.Add(1)
	return nil
}

func (f *fakeProvider) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}
