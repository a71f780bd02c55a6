package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/streams"
)

// mib converts bytes to MiB with three decimals.
func mib(b int64) float64 { return round3(float64(b) / (1 << 20)) }

// procRSS returns the resident set size of pid (VmRSS of /proc/<pid>/status) in bytes.
func procRSS(pid int) (int64, bool) {
	return parseVMRSS(readSmall("/proc/" + strconv.Itoa(pid) + "/status"))
}

// parseVMRSS reads the VmRSS line ("VmRSS:	  123456 kB") of a /proc/<pid>/status text.
func parseVMRSS(status string) (int64, bool) { return statusKB(status, "VmRSS") }

// statusKB reads the line key ("RssAnon:	  123456 kB") of a /proc/<pid>/status text, in bytes.
func statusKB(status, key string) (int64, bool) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// rssSampler keeps the highest RSS of one process, read from /proc every interval. The peak of
// a steady load is a steadier figure than one read, which may fall just before or after a GC.
// peakAnon is the highest RssAnon: the RSS less the pages of the binary and other files, which
// are the same whatever the process does, but differ by up to 17 MiB from one start to the next
// (the kernel maps more or fewer of the page cache's pages of the binary on each fault).
type rssSampler struct {
	peak, peakAnon int64
	stop           func()
}

// rssSettled waits at least five seconds, then, up to limit, until pid's RSS has not fallen by
// more than 1% over the last two seconds, and returns how long it waited and the RSS then
// (bytes; 0 when unreadable). Right after a load the Go runtime has not started returning the
// load's heap yet (its scavenger follows the garbage collector), so the RSS looks stable
// before it falls: hence the minimum.
func rssSettled(ctx context.Context, pid int, limit time.Duration) (time.Duration, int64) {
	const (
		window  = 2 * time.Second
		minimum = 5 * time.Second
	)
	start := time.Now()
	var samples []int64 // one per rssSampleInterval
	for {
		v, ok := procRSS(pid)
		if !ok {
			return time.Since(start), 0
		}
		samples = append(samples, v)
		n := int(window / rssSampleInterval)
		if time.Since(start) >= minimum && len(samples) > n && float64(samples[len(samples)-1-n]-v) <= 0.01*float64(v) {
			return time.Since(start), v
		}
		if time.Since(start) >= limit {
			return time.Since(start), v
		}
		select {
		case <-ctx.Done():
			return time.Since(start), v
		case <-time.After(rssSampleInterval):
		}
	}
}

// rssSampleInterval is how often an rssSampler reads /proc (cheap: no request to the process).
const rssSampleInterval = 250 * time.Millisecond

// startRSSSampler starts sampling pid at once and every rssSampleInterval until done is called.
func startRSSSampler(pid int) *rssSampler {
	s := &rssSampler{}
	read := func() {
		status := readSmall("/proc/" + strconv.Itoa(pid) + "/status")
		if v, ok := parseVMRSS(status); ok {
			s.peak = max(s.peak, v)
		}
		if v, ok := statusKB(status, "RssAnon"); ok {
			s.peakAnon = max(s.peakAnon, v)
		}
	}
	read()
	s.stop = ticker(rssSampleInterval, read)
	return s
}

// done stops the sampling and returns the peaks of the RSS and of its anonymous part in bytes
// (0 when nothing could be read).
func (s *rssSampler) done() (rss, anon int64) {
	s.stop()
	return s.peak, s.peakAnon
}

// Prometheus series of the orchestrator's GET /metrics that the backlog scenario reads: the
// process collector's RSS (what /proc says, also for an external orchestrator) and the Go heap
// in use (live objects and not yet swept garbage, without the memory the runtime still holds).
const (
	metricRSS       = "process_resident_memory_bytes"
	metricHeapInuse = "go_memstats_heap_inuse_bytes"
)

// scrapeMetrics reads the unlabelled samples names of GET <apiURL>/metrics (not authenticated).
// Names that are missing are missing from the map.
func scrapeMetrics(ctx context.Context, hc *http.Client, apiURL string, names ...string) (map[string]float64, error) {
	return fetchMetrics(ctx, hc, apiURL, func(r io.Reader) (map[string]float64, error) { return parseMetrics(r, names...) })
}

// fetchMetrics GETs <apiURL>/metrics (not authenticated) and parses the exposition with parse.
func fetchMetrics[T any](ctx context.Context, hc *http.Client, apiURL string, parse func(io.Reader) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(apiURL, "/")+"/metrics", nil)
	if err != nil {
		return zero, fmt.Errorf("scrape metrics: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return zero, fmt.Errorf("scrape metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // read in full below; a close error loses nothing
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return zero, fmt.Errorf("scrape metrics: %s", resp.Status)
	}
	return parse(resp.Body)
}

// parseMetrics returns the values of the unlabelled samples names of a Prometheus text
// exposition ("name value" or "name value timestamp" lines).
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !want[f[0]] {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil && !math.IsNaN(v) {
			out[f[0]] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// infoField returns the integer field key of a Redis INFO answer ("key:value" lines).
func infoField(info, key string) (int64, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// redisStats is what Redis holds for the backlog at one moment.
type redisStats struct {
	// usedMemory is INFO memory's used_memory: the whole server's, other tenants included.
	usedMemory int64
	// entries is XLEN of the job type's stream, and streamBytes its MEMORY USAGE (every node
	// counted: SAMPLES 0).
	entries     int64
	streamBytes int64
}

// redisReader reads the Redis side of the backlog: the server's memory and the job type's
// stream, whose key comes from the streams package (the owner of every key name).
type redisReader struct {
	rdb    *redis.Client
	stream string
}

// newRedisReader returns a reader of the stream of jobType under prefix on addr. The stream is
// assumed named after its type (the default, and the bench's own configuration).
func newRedisReader(addr, prefix, jobType string) *redisReader {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	return &redisReader{rdb: rdb, stream: streams.New(rdb, streams.Options{Prefix: prefix}).StreamKey(jobType)}
}

// read returns the current figures; a stream that does not exist yet has 0 entries and bytes.
func (r *redisReader) read(ctx context.Context) (redisStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var st redisStats
	info, err := r.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return st, fmt.Errorf("redis info memory: %w", err)
	}
	st.usedMemory, _ = infoField(info, "used_memory")
	if st.entries, err = r.rdb.XLen(ctx, r.stream).Result(); err != nil {
		return st, fmt.Errorf("redis xlen %s: %w", r.stream, err)
	}
	st.streamBytes, err = r.rdb.MemoryUsage(ctx, r.stream, 0).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("redis memory usage %s: %w", r.stream, err)
	}
	return st, nil
}

// close closes the Redis connection.
func (r *redisReader) close() { _ = r.rdb.Close() }
