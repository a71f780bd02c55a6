package testenv

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// BusyEnv names the environment variable that puts a whole test binary under load
// (BusyFromEnv): a count of spinning goroutines, e.g. ORCH_TEST_BUSY=2 on a two-core machine.
const BusyEnv = "ORCH_TEST_BUSY"

// Busy keeps n goroutines spinning (n <= 0: GOMAXPROCS) until the test ends, as another
// CPU-heavy process beside the test would. A test run under it shows that its assertions hold
// on a loaded machine (counts, states and bounds measured at the server, not the machine's
// speed); the processes the test starts share the same cores and are slowed too. The returned
// function stops the spinning early; cleanup calls it too.
func Busy(tb testing.TB, n int) (stop func()) {
	tb.Helper()
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	stop = spin(n)
	tb.Cleanup(stop)
	tb.Logf("busy: %d goroutines spinning beside the test", n)
	return stop
}

// BusyFromEnv starts n spinning goroutines when ORCH_TEST_BUSY=n (n > 0), for a whole test
// binary: TestMain calls it and stop after the tests. It returns a no-op when the variable is
// unset or not a positive count.
func BusyFromEnv() (stop func()) {
	n, err := strconv.Atoi(os.Getenv(BusyEnv))
	if err != nil || n <= 0 {
		return func() {}
	}
	return spin(n)
}

// spin starts n goroutines that loop until the returned function is called (idempotent),
// which waits for them.
func spin(n int) (stop func()) {
	var (
		quit atomic.Bool
		wg   sync.WaitGroup
		once sync.Once
	)
	for range n {
		wg.Go(func() {
			for !quit.Load() { //nolint:revive // empty-block: the spin is the load
			}
		})
	}
	return func() {
		once.Do(func() {
			quit.Store(true)
			wg.Wait()
		})
	}
}
