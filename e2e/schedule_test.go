package e2e

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

// The scheduler's end-to-end tests: real orchestrator and worker processes on MariaDB and
// Redis, simulated GPUs. What they check is read from the database afterwards (job rows, lease
// rows, audit rows, all stamped by the server), never from when the test noticed something.

// noAdmission turns admission control off: its GPU gate refuses GPU submits while more than
// 90% of the cluster's GPU memory is reserved, which these tests keep it at on purpose.
const noAdmission = "admission:\n  disabled: true\n"

// packingRatioGoal is the most the makespan of TestSchedulePacking may be over its lower bound
// (packingBound), as the issue asks. The scheduler does not know how long a job runs; what
// brings it there is the order of jobs submitted together, largest first (engine's
// scheduleOrder). In arrival order, with best fit backfilling whatever fits, the large two-GPU
// jobs were passed over early and ran one after another at the end: 1.21 to 1.27 over the
// memory bound, 1.32 with the machine kept busy. Largest first, on a 2-core machine: 1.15 to
// 1.18 over packingBound (1.17 to 1.20 over the memory bound alone), 1.16 with ORCH_TEST_BUSY=2
// and 1.15 beside the whole e2e suite. A better order of the same jobs, found by a search that
// knows their run times, reaches 1.09 in a simulation; holding nodes sooner made it worse.
const packingRatioGoal = 1.2

// safetyMarginMB is leases.safety_margin_mb, left at its default by the test clusters.
const safetyMarginMB = 512

// jobRow is what the tests read of a job's row.
type jobRow struct {
	ID          string
	MemoryMB    int64 // on each of its GPUs
	GPUs        int
	CreatedAt   time.Time
	AvailableAt time.Time
	StartedAt   time.Time // zero until it started
	FinishedAt  time.Time // zero until it finished
}

// jobRows returns the jobs whose id starts with prefix, by id.
func (c *cluster) jobRows(prefix string) map[string]jobRow {
	rows, err := c.db.Query(`SELECT job_id, gpu_memory_mb, gpus, created_at, available_at, started_at, finished_at
		FROM orchestrator_jobs WHERE job_id LIKE ?`, prefix+"%")
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string]jobRow{}
	for rows.Next() {
		var j jobRow
		var started, finished sql.NullTime
		require.NoError(c.t, rows.Scan(&j.ID, &j.MemoryMB, &j.GPUs, &j.CreatedAt, &j.AvailableAt, &started, &finished))
		j.GPUs = max(j.GPUs, 1)
		j.StartedAt, j.FinishedAt = started.Time, finished.Time
		out[j.ID] = j
	}
	require.NoError(c.t, rows.Err())
	return out
}

// leaseRow is what the tests read of a GPU lease's row, and the audit rows that began and
// ended it.
type leaseRow struct {
	Token, JobID, Node, Status string
	GPUs                       []int // gpu_index, then gpu_indexes
	MemoryMB                   int64 // on each of GPUs
	Exclusive                  bool
	CreatedAt                  time.Time
	EndedAt                    time.Time // zero while active
	// FirstAudit is the id of the lease's first audit row (job.placed, lease.granted, or the
	// claim that took it); EndAudit the id of the row that ended it (lease.released,
	// lease.expired, or the job's transition that released it), 0 while active.
	FirstAudit, EndAudit int64
}

// gpuLeases returns every GPU lease of the cluster, oldest first.
func (c *cluster) gpuLeases() []leaseRow {
	rows, err := c.db.Query(`SELECT l.token, COALESCE(l.job_id, ''), l.node_id, l.gpu_index, l.gpu_indexes, l.memory_mb,
		l.exclusive, l.status, l.created_at, l.ended_at,
		(SELECT COALESCE(MIN(a.id), 0) FROM orchestrator_audit a WHERE a.lease_token = l.token),
		(SELECT COALESCE(MIN(a.id), 0) FROM orchestrator_audit a WHERE a.lease_token = l.token AND
			(a.event_type IN ('lease.released', 'lease.expired') OR JSON_VALUE(a.details, '$.lease_released') IN ('true', '1')))
		FROM orchestrator_leases l WHERE l.mode = 'gpu' ORDER BY l.created_at, l.token`)
	require.NoError(c.t, err)
	defer rows.Close()
	var out []leaseRow
	for rows.Next() {
		var l leaseRow
		var first int
		var extra string
		var ended sql.NullTime
		require.NoError(c.t, rows.Scan(&l.Token, &l.JobID, &l.Node, &first, &extra, &l.MemoryMB, &l.Exclusive, &l.Status,
			&l.CreatedAt, &ended, &l.FirstAudit, &l.EndAudit))
		l.GPUs = []int{first}
		for _, s := range strings.Split(extra, ",") {
			if s == "" {
				continue
			}
			i, err := strconv.Atoi(s)
			require.NoError(c.t, err, "gpu_indexes %q of lease %s", extra, l.Token)
			l.GPUs = append(l.GPUs, i)
		}
		l.EndedAt = ended.Time
		out = append(out, l)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// gpuKey is one GPU of one node.
type gpuKey struct {
	Node  string
	Index int
}

func (k gpuKey) String() string { return fmt.Sprintf("%s/%d", k.Node, k.Index) }

// gpuTotals returns the memory of every GPU the cluster's telemetry reported.
func (c *cluster) gpuTotals() map[gpuKey]int64 {
	rows, err := c.db.Query(`SELECT node_id, gpu_index, memory_total_mb FROM gpu_devices`)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[gpuKey]int64{}
	for rows.Next() {
		var k gpuKey
		var total int64
		require.NoError(c.t, rows.Scan(&k.Node, &k.Index, &total))
		out[k] = total
	}
	require.NoError(c.t, rows.Err())
	return out
}

// leaseClock places the start and the end of a lease on one axis; active leases end at
// math.MaxInt64.
type leaseClock func(l *leaseRow) (start, end int64)

// byTimestamps orders by created_at and ended_at (UnixNano).
func byTimestamps(l *leaseRow) (int64, int64) {
	if l.EndedAt.IsZero() {
		return l.CreatedAt.UnixNano(), math.MaxInt64
	}
	return l.CreatedAt.UnixNano(), l.EndedAt.UnixNano()
}

// byAuditOrder orders by the ids of the audit rows that began and ended each lease: the order
// the transactions that placed and ended the leases wrote in. Those rows are written inside
// the transactions, and every placement holds the GPU rows locked from before its read of the
// reservations to its commit, so a placement that counted a lease as ended comes after the
// row that ended it. The timestamps, by contrast, are each transaction's clock reading from
// before it waited for its locks: a placement's created_at may come before the ended_at of the
// lease whose room it took.
func byAuditOrder(l *leaseRow) (int64, int64) {
	if l.EndAudit == 0 {
		return l.FirstAudit, math.MaxInt64
	}
	return l.FirstAudit, l.EndAudit
}

// overCommits replays the lease rows in the order clock gives: on every GPU, at every point,
// the memory of the leases active then (from their placement to their end) must be within the
// GPU's total less the safety margin, and an exclusive lease must be the GPU's only one. It
// returns what went over (at most 20 lines), and the highest reservation each GPU reached.
func overCommits(ls []leaseRow, totals map[gpuKey]int64, clock leaseClock) (problems []string, peak map[gpuKey]int64) {
	type event struct {
		at    int64
		start bool
		l     *leaseRow
	}
	byGPU := map[gpuKey][]event{}
	for i := range ls {
		l := &ls[i]
		start, end := clock(l)
		for _, g := range l.GPUs {
			k := gpuKey{l.Node, g}
			byGPU[k] = append(byGPU[k], event{start, true, l}, event{end, false, l})
		}
	}
	peak = map[gpuKey]int64{}
	for k, evs := range byGPU {
		total, ok := totals[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: leases on a GPU the telemetry never reported", k))
			continue
		}
		// At one point the ends go first: a lease that ends when another begins left room.
		slices.SortStableFunc(evs, func(a, b event) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(boolInt(a.start), boolInt(b.start)))
		})
		active := map[*leaseRow]bool{}
		var sum int64
		for _, ev := range evs {
			if !ev.start {
				delete(active, ev.l)
				sum -= ev.l.MemoryMB
				continue
			}
			active[ev.l] = true
			sum += ev.l.MemoryMB
			peak[k] = max(peak[k], sum)
			exclusive := false
			for l := range active {
				exclusive = exclusive || l.Exclusive
			}
			if sum <= total-safetyMarginMB && (!exclusive || len(active) == 1) {
				continue
			}
			var held []string
			for l := range active {
				held = append(held, fmt.Sprintf("%s (job %s, %d MB, exclusive %t, %s..%s, audit rows %d..%d, %s)",
					l.Token, l.JobID, l.MemoryMB, l.Exclusive, l.CreatedAt.Format("15:04:05.000000"),
					l.EndedAt.Format("15:04:05.000000"), l.FirstAudit, l.EndAudit, l.Status))
			}
			slices.Sort(held)
			if len(problems) < 20 {
				problems = append(problems, fmt.Sprintf("%s: %d MB reserved of %d grantable by %d leases when %s began: %s",
					k, sum, total-safetyMarginMB, len(active), ev.l.Token, strings.Join(held, ", ")))
			}
		}
	}
	slices.Sort(problems)
	return problems, peak
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// requireNoOverCommit replays the cluster's GPU leases in the order their transactions wrote
// (byAuditOrder) and fails the test where a GPU went over. Every lease must have the audit
// rows that place it in that order. A replay by timestamps that disagrees is logged.
func (c *cluster) requireNoOverCommit() []leaseRow {
	c.t.Helper()
	ls := c.gpuLeases()
	for _, l := range ls {
		require.NotZero(c.t, l.FirstAudit, "lease %s (job %s) has no audit row", l.Token, l.JobID)
		require.Equal(c.t, l.EndedAt.IsZero(), l.EndAudit == 0, "lease %s (job %s, %s): ended_at %s, ending audit row %d",
			l.Token, l.JobID, l.Status, l.EndedAt, l.EndAudit)
	}
	totals := c.gpuTotals()
	problems, peak := overCommits(ls, totals, byAuditOrder)
	require.Empty(c.t, problems, "over-committed GPUs (replay of %d lease rows in audit order)", len(ls))
	c.t.Logf("lease replay: %d GPU leases, never over-committed; peak reservation per GPU (MB): %v", len(ls), peak)
	if skewed, _ := overCommits(ls, totals, byTimestamps); len(skewed) > 0 {
		c.t.Logf("replayed by created_at/ended_at instead, %d placements seem to over-commit: their created_at is before "+
			"the ended_at of a lease whose room they took (the clock is read before the locks are taken); first: %s",
			len(skewed), skewed[0])
	}
	return ls
}

// TestSchedulePacking: two nodes of two simulated 81,559 MB GPUs and forty GPU jobs of mixed
// sizes (10 to 80 GB on one or two GPUs, 2 to 5 s each, drawn from a fixed seed), submitted at
// once. The scheduler packs them: no GPU is ever over-committed (the lease rows replayed), and
// the makespan, from the first start to the last finish, is within packingRatioGoal times a
// lower bound on any schedule's (packingBound): the memory-seconds over the cluster's
// grantable memory, counting the holes beside large jobs that no job of the set could fill, and
// the longest job.
func TestSchedulePacking(t *testing.T) {
	t.Parallel()
	c := newGPUClusterWith(t, noAdmission)
	c.startOrchestrator("orchestrator")
	const (
		gpuMB     = 81559
		grantable = gpuMB - safetyMarginMB
		nodes     = 2
		perNode   = 2
		jobs      = 40
	)
	// Sixteen slots a node: the most jobs the scheduler can place on one (eight of 10 GB on
	// each GPU), so every placement is claimed at once.
	for i := range nodes {
		node := fmt.Sprintf("pack-node-%d", i)
		c.startSimNode("worker-"+node, node, fmt.Sprintf("%dx%d", perNode, gpuMB), 16, "gpu_sleep")
	}

	rng := rand.New(rand.NewPCG(20261129, 1300086))
	reqs := make([]client.SubmitRequest, jobs)
	nominal := map[string]time.Duration{}
	for i := range reqs {
		mem := 10000 * (1 + rng.IntN(8)) // 10..80 GB in steps of 10: sizes that can pair up
		gpus := 1
		if rng.IntN(4) == 0 {
			gpus = 2
		}
		ms := 2000 + 100*rng.IntN(31)
		id := fmt.Sprintf("pack-%02d", i)
		nominal[id] = time.Duration(ms) * time.Millisecond
		reqs[i] = client.SubmitRequest{JobID: id, Type: "gpu_sleep", Agent: "e2e", Payload: []byte(fmt.Sprintf(`{"ms": %d}`, ms)),
			Resources: &client.Resources{GPUMemoryMB: mem, GPUs: gpus}}
	}
	resp, err := c.api.SubmitBatch(context.Background(), client.SubmitBatchRequest{Jobs: reqs})
	require.NoError(t, err)
	require.Equal(t, jobs, resp.Created, "%+v", resp.Results)
	c.waitStatus("done", jobs, 3*time.Minute)

	c.requireNoOverCommit()
	rows := c.jobRows("pack-")
	require.Len(t, rows, jobs)
	var (
		first, last time.Time
		ran, nom    []packedJob // the runs the server recorded; the payloads' nominal ones
	)
	for _, j := range rows {
		require.False(t, j.StartedAt.IsZero() || j.FinishedAt.IsZero(), "job %s: %+v", j.ID, j)
		if first.IsZero() || j.StartedAt.Before(first) {
			first = j.StartedAt
		}
		if j.FinishedAt.After(last) {
			last = j.FinishedAt
		}
		// The bound is computed from the runs the server recorded (started_at to finished_at):
		// what the handlers took on this machine, not what the scheduler spent placing them.
		ran = append(ran, packedJob{j.MemoryMB, j.GPUs, j.FinishedAt.Sub(j.StartedAt).Seconds()})
		nom = append(nom, packedJob{j.MemoryMB, j.GPUs, nominal[j.ID].Seconds()})
	}
	makespan := last.Sub(first).Seconds()
	b := packingBound(ran, nodes*perNode, grantable)
	ratio := makespan / b.Bound
	t.Logf("makespan %.2fs; lower bound %.2fs = max(memory %.2fs, memory with the unusable holes of large jobs %.2fs "+
		"(jobs over %d MB count whole GPUs, jobs under %d MB none), longest job %.2fs); ratio %.3f (%.3f over the memory bound alone)",
		makespan, b.Bound, b.Memory, b.Holes, grantable-b.Threshold, b.Threshold, b.Longest, ratio, makespan/b.Memory)
	nb := packingBound(nom, nodes*perNode, grantable)
	t.Logf("with the payloads' nominal run times: bound %.2fs, ratio %.3f", nb.Bound, makespan/nb.Bound)
	require.LessOrEqual(t, ratio, packingRatioGoal, "makespan %.2fs over %.2f times the lower bound %.2fs", makespan,
		packingRatioGoal, b.Bound)
}

// packedJob is one job of TestSchedulePacking: memory on each GPU, GPUs, seconds.
type packedJob struct {
	MemoryMB int64
	GPUs     int
	Seconds  float64
}

// packedBound is a lower bound on the makespan of any schedule of a set of jobs on gpus GPUs
// of grantable MB each, and the bounds it is the largest of.
type packedBound struct {
	Bound float64
	// Memory is the memory-seconds of the jobs over the cluster's grantable memory.
	Memory float64
	// Holes is the best bound of the family below, and Threshold the T it was found at.
	Holes     float64
	Threshold int64
	// Longest is the longest job.
	Longest float64
}

// packingBound computes the lower bounds. Holes weighs each job, for a threshold T of at most
// half a GPU, by w(m) = 1 when m > G−T (it takes the whole GPU: only jobs under T fit beside
// it), m/G when T <= m <= G−T, and 0 when m < T; the bound is the weighted GPU-seconds over the
// GPUs. It holds for any schedule because on one GPU at any instant the weights of the jobs
// there sum to at most 1: with a job over G−T (at most one: G−T >= G/2) the others are under T
// and weigh 0; without one, every weight is at most m/G and the memory on the GPU is at most
// G. T = 0 gives the memory bound, T = G/2 the GPU-seconds of the jobs over half a GPU. The
// thresholds tried are 0 and one past each job size up to G/2.
func packingBound(jobs []packedJob, gpus int, grantable int64) packedBound {
	weighed := func(t int64) float64 {
		var sum float64
		for _, j := range jobs {
			w := float64(j.MemoryMB) / float64(grantable)
			switch {
			case j.MemoryMB > grantable-t:
				w = 1
			case j.MemoryMB < t:
				w = 0
			}
			sum += w * float64(j.GPUs) * j.Seconds
		}
		return sum / float64(gpus)
	}
	var b packedBound
	b.Memory = weighed(0)
	b.Holes = b.Memory
	thresholds := []int64{grantable / 2}
	for _, j := range jobs {
		thresholds = append(thresholds, min(j.MemoryMB+1, grantable/2))
		b.Longest = max(b.Longest, j.Seconds)
	}
	for _, t := range thresholds {
		if h := weighed(t); h > b.Holes {
			b.Holes, b.Threshold = h, t
		}
	}
	b.Bound = max(b.Holes, b.Longest)
	return b
}

// releasedLease returns the lease of job that its completion released: the one it ran under.
func releasedLease(t *testing.T, ls []leaseRow, job string) leaseRow {
	t.Helper()
	var out []leaseRow
	for _, l := range ls {
		if l.JobID == job && l.Status == client.LeaseReleased {
			out = append(out, l)
		}
	}
	require.Len(t, out, 1, "released leases of job %s", job)
	return out[0]
}

// placedAt returns, per job, the time of its last job.placed audit row (the scheduler's clock
// at the start of the pass that placed it).
func (c *cluster) placedAt() map[string]time.Time {
	rows, err := c.db.Query(`SELECT job_id, MAX(ts) FROM orchestrator_audit WHERE event_type = 'job.placed' GROUP BY job_id`)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var ts time.Time
		require.NoError(c.t, rows.Scan(&id, &ts))
		out[id] = ts
	}
	require.NoError(c.t, rows.Err())
	return out
}

// quantile returns the q quantile of sorted by the nearest rank: the smallest value with at
// least q of the values at or below it.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// TestScheduleReleaseToStart: one node of one GPU and fifty-one GPU jobs of 150 ms that cannot
// share it (16,000 MB each of 24,064 grantable), submitted at once, run one after the other:
// each waits while the one before holds the GPU. Fifty times, from the release of a job's lease
// (its ended_at) to the start of the next (started_at), the room is handed on: the release
// wakes the scheduler, whose pass places the next job, which is published to the node's stream
// and read, claimed and started by the node's worker. The 99th percentile of those fifty gaps
// is under a second, taken as the second largest: one handover in fifty may miss its wake,
// and the scheduler's one-second tick then covers it, so the largest is under two seconds.
func TestScheduleReleaseToStart(t *testing.T) {
	t.Parallel()
	c := newGPUClusterWith(t, noAdmission)
	c.startOrchestrator("orchestrator")
	// Two slots: while one job runs, the worker's reader already waits on the node's stream.
	c.startSimNode("worker-chain", "chain-node", "24576", 2, "gpu_sleep")
	const trials = 50
	reqs := make([]client.SubmitRequest, trials+1)
	for i := range reqs {
		reqs[i] = client.SubmitRequest{JobID: fmt.Sprintf("chain-%02d", i), Type: "gpu_sleep", Agent: "e2e",
			Payload: []byte(`{"ms": 150}`)}
	}
	resp, err := c.api.SubmitBatch(context.Background(), client.SubmitBatchRequest{Jobs: reqs})
	require.NoError(t, err)
	require.Equal(t, len(reqs), resp.Created, "%+v", resp.Results)
	c.waitStatus("done", len(reqs), 3*time.Minute)

	ls := c.requireNoOverCommit()
	jobs := c.jobRows("chain-")
	placed := c.placedAt()
	order := slices.SortedFunc(maps.Values(jobs), func(a, b jobRow) int { return a.StartedAt.Compare(b.StartedAt) })
	require.Len(t, order, trials+1)
	var gaps, toPlaced, toStart []time.Duration
	for i := 1; i < len(order); i++ {
		prev, next := order[i-1], order[i]
		released := releasedLease(t, ls, prev.ID).EndedAt
		require.True(t, next.CreatedAt.Before(released), "job %s waited for %s's room", next.ID, prev.ID)
		require.False(t, next.StartedAt.Before(released), "job %s started at %s, before %s released the GPU at %s",
			next.ID, next.StartedAt, prev.ID, released)
		gaps = append(gaps, next.StartedAt.Sub(released))
		toPlaced = append(toPlaced, placed[next.ID].Sub(released))
		toStart = append(toStart, next.StartedAt.Sub(placed[next.ID]))
	}
	for _, d := range [][]time.Duration{gaps, toPlaced, toStart} {
		slices.Sort(d)
	}
	p50, p99, largest := quantile(gaps, 0.5), gaps[len(gaps)-2], gaps[len(gaps)-1]
	t.Logf("release to start over %d handovers: p50 %s, p99 (the second largest) %s, largest %s", len(gaps),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), largest.Round(time.Millisecond))
	t.Logf("of which release to the placing pass's clock: p50 %s, max %s; from there to the start: p50 %s, max %s",
		quantile(toPlaced, 0.5).Round(time.Millisecond), toPlaced[len(toPlaced)-1].Round(time.Millisecond),
		quantile(toStart, 0.5).Round(time.Millisecond), toStart[len(toStart)-1].Round(time.Millisecond))
	require.Less(t, p99, time.Second, "p99 of release to start; all gaps: %v", gaps)
	require.Less(t, largest, 2*time.Second, "the largest gap from release to start; all gaps: %v", gaps)
}

// heldAt returns when p's scheduler logged that it held a node for job, and the node.
func heldAt(t *testing.T, p *proc, job string) (time.Time, string, bool) {
	t.Helper()
	b, err := os.ReadFile(p.log)
	require.NoError(t, err)
	for line := range bytes.Lines(b) {
		var entry struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			JobID string    `json:"job_id"`
			Node  string    `json:"node_id"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "node held for a blocked gpu job" && entry.JobID == job {
			return entry.Time, entry.Node, true
		}
	}
	return time.Time{}, "", false
}

// TestScheduleNoStarvation: a node with one GPU runs a steady stream of small GPU jobs (4,000
// MB, 800 ms: six at a time, three more always waiting), and a job that needs most of the GPU
// (20,000 MB) or all of it (exclusive) arrives behind some of them. The GPU never empties: as
// each small job ends, the next takes its room, so without a hold the big job would wait as
// long as the stream lasts. With scheduler.reserve_after at 1 s, the scheduler holds the node
// for it once it has waited that long at the head of the line: no job behind it is placed
// there any more, the small jobs on it end, and it starts. It starts within reserve_after plus
// the longest run of the jobs that held the node when the hold began, plus a second for the
// placement (what TestScheduleReleaseToStart bounds); the stream goes on until it does. The
// stream's jobs run long enough that its producer keeps the GPU full on a busy machine too
// (with 300 ms jobs, a producer slowed by the rest of the suite let the GPU empty, and the big
// job started without needing a hold), and few enough wait that some submitted after the big
// job still take the room that frees before the hold (with six waiting, the ones ahead of it
// took all of it, and nothing showed what the hold holds back).
func TestScheduleNoStarvation(t *testing.T) {
	t.Parallel()
	t.Run("large", func(t *testing.T) {
		t.Parallel()
		testNoStarvation(t, client.Resources{GPUMemoryMB: 20000})
	})
	t.Run("exclusive", func(t *testing.T) {
		t.Parallel()
		testNoStarvation(t, client.Resources{Exclusive: true})
	})
}

// testNoStarvation is TestScheduleNoStarvation for a big job of res.
func testNoStarvation(t *testing.T, res client.Resources) {
	const (
		reserveAfter = time.Second
		placement    = time.Second
		open         = 9 // small jobs submitted and not done: six run, three wait
	)
	c := newGPUClusterWith(t, noAdmission+fmt.Sprintf("scheduler:\n  reserve_after: %s\n", reserveAfter))
	orch := c.startOrchestrator("orchestrator")
	c.startSimNode("worker-stream", "stream-node", "24576", 8, "gpu_sleep")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		produced atomic.Int64
		wg       sync.WaitGroup
		failure  = make(chan error, 1)
	)
	wg.Go(func() {
		for ctx.Err() == nil {
			var n int
			err := c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orchestrator_jobs WHERE job_id LIKE 'stream-%'
				AND status NOT IN ('done', 'dead_letter', 'cancelled')`).Scan(&n)
			for ; err == nil && n < open; n++ {
				_, err = c.api.Submit(ctx, client.SubmitRequest{JobID: fmt.Sprintf("stream-%04d", produced.Add(1)),
					Type: "gpu_sleep", Agent: "e2e", Payload: []byte(`{"ms": 800}`), Resources: &client.Resources{GPUMemoryMB: 4000}})
			}
			if err != nil && ctx.Err() == nil {
				failure <- err
				return
			}
			select { // the producer's pace, not synchronisation
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	stopStream := func() {
		stop()
		wg.Wait()
		select {
		case err := <-failure:
			require.NoError(t, err, "the stream's producer")
		default:
		}
	}
	defer stopStream()
	// The stream is flowing: a dozen small jobs are done.
	require.Eventually(t, func() bool { return c.statusCounts()["done"] >= 12 }, time.Minute, 50*time.Millisecond,
		"the stream never got going")

	_, err := c.api.Submit(context.Background(), client.SubmitRequest{JobID: "big", Type: "gpu_sleep", Agent: "e2e",
		Payload: []byte(`{"ms": 300}`), Resources: &res})
	require.NoError(t, err)
	// Far more than the bound (a few seconds), far less than the stream would take to end by
	// itself (never).
	var reason string // the big job's waiting reason, last seen
	started := assert.Eventually(t, func() bool {
		j, err := c.api.GetJob(context.Background(), "big")
		if err == nil && j.WaitingReason != "" {
			reason = j.WaitingReason
		}
		return err == nil && j.StartedAt != nil
	}, 30*time.Second, 50*time.Millisecond)
	require.True(t, started, "the big job never started; its waiting reason: %q", reason)
	stopStream()
	t.Logf("the big job started; its last waiting reason: %q", reason)
	c.waitJob("big", time.Minute, func(j client.Job) bool { return j.Status == "done" })

	ls := c.requireNoOverCommit()
	whole := c.jobRows("big")["big"]
	wholeLease := releasedLease(t, ls, "big")
	stream := c.jobRows("stream-")
	held, node, ok := heldAt(t, orch, "big")
	require.True(t, ok, "the scheduler never held a node for the big job")
	require.Equal(t, "stream-node", node)
	require.False(t, held.Before(whole.AvailableAt.Add(reserveAfter)), "held at %s, before it waited %s (available at %s)",
		held, reserveAfter, whole.AvailableAt)

	var (
		overtook, waited int           // small jobs behind it placed before it; small jobs held back
		longest          time.Duration // the longest run of the small jobs on the node when the hold began
	)
	for _, l := range ls {
		j, ok := stream[l.JobID]
		if !ok {
			continue
		}
		behind := j.CreatedAt.After(whole.CreatedAt)
		switch {
		case l.FirstAudit < wholeLease.FirstAudit && behind:
			overtook++
			// After the hold, nothing behind it was placed on its node: the pass that held it
			// logged the hold after its commit, and the next pass reads its clock after that.
			require.False(t, l.CreatedAt.After(held), "small job %s, behind it in line, placed at %s after the hold at %s",
				j.ID, l.CreatedAt, held)
		case l.FirstAudit > wholeLease.FirstAudit && j.CreatedAt.Before(wholeLease.CreatedAt):
			waited++
		}
		if !l.CreatedAt.After(held) && l.EndedAt.After(held) {
			longest = max(longest, l.EndedAt.Sub(l.CreatedAt))
		}
	}
	took := whole.StartedAt.Sub(whole.AvailableAt)
	bound := reserveAfter + longest + placement
	t.Logf("%d small jobs submitted; the big job waited %s to start (the hold began %s after it was available, "+
		"and it started %s after the hold); bound %s = reserve_after %s + the longest run holding the node then %s + %s",
		produced.Load(), took.Round(time.Millisecond), held.Sub(whole.AvailableAt).Round(time.Millisecond),
		whole.StartedAt.Sub(held).Round(time.Millisecond), bound.Round(time.Millisecond), reserveAfter,
		longest.Round(time.Millisecond), placement)
	t.Logf("%d small jobs behind it were placed before the hold, %d submitted before it was placed waited for it", overtook, waited)
	require.Positive(t, overtook, "no small job overtook the big job: the test proves nothing about the hold")
	// Small jobs kept coming while the node was held: without the hold they would have taken it.
	// (Those submitted in the few ms between the hold and the big job's placement waited for it:
	// waited, often 0 when the node empties at once.)
	after := 0
	for _, j := range stream {
		if j.CreatedAt.After(held) {
			after++
		}
	}
	require.Positive(t, after, "the stream had dried up when the node was held")
	require.LessOrEqual(t, took, bound)
}

// TestScheduleFailover: two orchestrators share MariaDB and Redis; one leads and runs the
// scheduler. Sixteen GPU jobs queue for the two GPUs of one node (one job a GPU at a time);
// the leader is killed with SIGKILL while most of them wait. The other instance takes the lead
// and its scheduler places the rest: every job ends done, with exactly one running → done
// audit row each, and the lease rows replayed never over-commit a GPU.
func TestScheduleFailover(t *testing.T) {
	t.Parallel()
	// A claim whose answer died with the killed instance comes back within seconds.
	c := newGPUClusterWith(t, noAdmission+"claim_idle: 2s\nreclaim_interval: 500ms\n")
	insts := []*instance{c.newInstance("orchestrator-a", c.addr), c.newInstance("orchestrator-b", freeAddr(t))}
	for _, o := range insts {
		c.startInstance(o)
		o.waitReady(t, time.Minute)
	}
	lb := newFailover(t, insts...)
	c.api = client.New(lb.url, c.adminToken)
	c.startSimNode("worker-failover", "failover-node", "2x24576", 4, "gpu_sleep", "ORCH_API_URL="+lb.url)
	leader, st := c.waitLeader(insts, 0, 30*time.Second)
	term := st.Leader.Term

	const jobs = 16
	reqs := make([]client.SubmitRequest, jobs)
	for i := range reqs {
		reqs[i] = client.SubmitRequest{JobID: fmt.Sprintf("failover-%02d", i), Type: "gpu_sleep", Agent: "e2e",
			Payload: []byte(`{"ms": 600}`)}
	}
	resp, err := c.api.SubmitBatch(context.Background(), client.SubmitBatchRequest{Jobs: reqs})
	require.NoError(t, err)
	require.Equal(t, jobs, resp.Created, "%+v", resp.Results)
	require.Eventually(t, func() bool { return c.statusCounts()["done"] >= 2 }, time.Minute, 20*time.Millisecond,
		"no job ended under the first leader")
	waiting := c.statusCounts()["pending"]
	require.GreaterOrEqual(t, waiting, jobs/2, "jobs wait for room when the leader dies: %v", c.statusCounts())

	leader.proc.kill()
	next, st := c.waitLeader([]*instance{other(insts, leader)}, term, time.Minute)
	t.Logf("%s killed with %d jobs pending; %s leads in term %d", leader.name, waiting, next.name, st.Leader.Term)
	c.waitStatus("done", jobs, 2*time.Minute)

	done := c.doneAuditCounts()
	require.Len(t, done, jobs)
	for id, n := range done {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}
	c.requireNoOverCommit()
	var afterward int
	for _, at := range c.placedAt() {
		if !at.Before(st.Leader.Since) {
			afterward++
		}
	}
	t.Logf("the new leader's scheduler placed %d jobs", afterward)
	require.Positive(t, afterward, "the new leader placed no job")
}
