package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/gpuorch/orchestrator/store"
)

// bucketPeriod is the period of every redis_rate limit: rates are per second with fractions
// (0.5/s), and redis_rate takes an integer count per period, so a rate r becomes
// round(1000·r) per 1000 s, which has the same emission interval 1/r to a thousandth.
const bucketPeriod = 1000 * time.Second

// redisRateKeyPrefix is what redis_rate puts before every key it is given.
const redisRateKeyPrefix = "rate:"

// BucketKey is the Redis key of an agent's token bucket under policy p: under the cluster's key
// prefix, like every key of the orchestrator, so that clusters (and test runs) sharing a Redis
// do not share buckets, and a prefix's keys can be listed and deleted together. The key holds
// the GCRA's theoretical arrival time (TAT) and expires by itself once the bucket is full again.
//
// The rate and burst are part of the key, so that a policy change starts a fresh, full bucket.
// Reusing the old key would carry the old policy's debt over: an agent throttled at 0.01/s has
// a TAT up to 100 s ahead, and raising its rate to 1000/s would still refuse it for those 100 s.
// The price is one extra burst per change; the old key expires on its own.
func BucketKey(prefix, agent string, p store.AdmissionPolicy) string {
	return prefix + "admission:bucket:" + agent + ":" + strconv.FormatFloat(p.RatePerSec, 'g', -1, 64) +
		"/" + strconv.Itoa(p.Burst)
}

// limit converts a policy to a redis_rate limit.
func limit(p store.AdmissionPolicy) redis_rate.Limit {
	return redis_rate.Limit{Rate: max(1, int(math.Round(p.RatePerSec*1000))), Burst: p.Burst, Period: bucketPeriod}
}

// Limiter is the token bucket of every agent, shared by all orchestrator instances: a GCRA in
// Redis (github.com/go-redis/redis_rate/v10), one key per agent, one round trip per decision.
// It also tracks whether Redis answers, so that the controller can apply the configured
// fail-open / fail-closed rule and say so in the logs and /readyz. Safe for concurrent use.
type Limiter struct {
	rl      *redis_rate.Limiter
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	log     *slog.Logger
	stash   *tokenStash

	mu        sync.Mutex
	down      bool
	downSince time.Time
	lastErr   error
}

// NewLimiter returns the limiter over rdb; prefix is the cluster's Redis key prefix and
// timeout bounds one call, which takes a client that honours context deadlines
// (ContextTimeoutEnabled, as streams.NewRedis sets it).
func NewLimiter(rdb redis.UniversalClient, prefix string, timeout time.Duration, log *slog.Logger) *Limiter {
	return &Limiter{rl: redis_rate.NewLimiter(prefixedScripter{rdb}), rdb: rdb, prefix: prefix, timeout: timeout,
		log: log, stash: newTokenStash()}
}

// ErrLimiterDown is the error of Allow while Redis is known to be unreachable.
var ErrLimiterDown = errors.New("admission limiter down")

// Allow takes one token from agent's bucket (from the tokens this instance took ahead, when
// it has some: see tokenStash). It returns whether a token was taken and, when not, how long
// until one is there. An error means Redis did not answer; the limiter is then down, and later
// calls fail at once with ErrLimiterDown (no request waits for a timeout during an outage)
// until a Ping succeeds: the refresher pings every refresh interval. A cancelled ctx is
// returned as is and marks nothing.
func (l *Limiter) Allow(ctx context.Context, agent string, p store.AdmissionPolicy) (bool, time.Duration, error) {
	if !l.State().Up {
		return false, 0, ErrLimiterDown
	}
	key := BucketKey(l.prefix, agent, p)
	want := l.stash.take(key, batchSize(p), time.Now())
	if want == 0 {
		return true, 0, nil
	}
	got, retryAfter, err := l.takeTokens(ctx, key, p, want)
	l.stash.put(key, want, got, time.Now())
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, ctx.Err()
		}
		l.observe(err)
		return false, 0, fmt.Errorf("take a token of agent %s: %w", agent, err)
	}
	l.observe(nil)
	return got > 0, retryAfter, nil
}

// takeTokens takes want tokens of key's bucket, all or none (GCRA, exact); when a batch is
// refused it asks for the one token the request needs. It returns how many it took and, when
// none, how long until one is there.
func (l *Limiter) takeTokens(ctx context.Context, key string, p store.AdmissionPolicy, want int) (int, time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	res, err := l.rl.AllowN(cctx, key, limit(p), want)
	if err == nil && res.Allowed == 0 && want > 1 {
		want = 1
		res, err = l.rl.AllowN(cctx, key, limit(p), 1)
	}
	if err != nil {
		return 0, 0, err
	}
	if res.Allowed == 0 {
		return 0, max(res.RetryAfter, 0), nil
	}
	return want, 0, nil
}

// Ping checks that Redis answers and records the outcome like a call of Allow, so that the
// state shown by /readyz follows Redis even while no request comes.
func (l *Limiter) Ping(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := l.rdb.Ping(cctx).Err()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	l.observe(err)
	if err != nil {
		return fmt.Errorf("ping admission limiter: %w", err)
	}
	return nil
}

// Reset forgets agent's bucket under policy p: its next request finds the bucket full.
func (l *Limiter) Reset(ctx context.Context, agent string, p store.AdmissionPolicy) error {
	if err := l.rl.Reset(ctx, BucketKey(l.prefix, agent, p)); err != nil {
		return fmt.Errorf("reset token bucket of agent %s: %w", agent, err)
	}
	return nil
}

// observe records the outcome of a Redis call, logging the transitions only.
func (l *Limiter) observe(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && !l.down:
		l.down, l.downSince, l.lastErr = true, time.Now(), err
		l.log.Error("admission limiter unreachable: token buckets are not checked until Redis answers; "+
			"requests are admitted or refused by admission.limiter_down_gpu / limiter_down_cpu", "error", err)
	case err != nil:
		l.lastErr = err
	case l.down:
		l.log.Info("admission limiter reachable again: token buckets are checked", "down_for", time.Since(l.downSince).Round(time.Millisecond))
		l.down, l.downSince, l.lastErr = false, time.Time{}, nil
	}
}

// LimiterState is whether Redis answers the limiter.
type LimiterState struct {
	Up        bool
	DownSince time.Time // zero when up
	Err       error     // the last error while down
}

// State returns the limiter's health.
func (l *Limiter) State() LimiterState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LimiterState{Up: !l.down, DownSince: l.downSince, Err: l.lastErr}
}

// prefixedScripter is the Redis client as redis_rate sees it, minus redis_rate's own "rate:"
// key prefix: the limiter passes keys that carry the cluster's prefix already (BucketKey), and
// the orchestrator's keys all start with that prefix.
type prefixedScripter struct{ rdb redis.UniversalClient }

func (s prefixedScripter) keys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimPrefix(k, redisRateKeyPrefix)
	}
	return out
}

func (s prefixedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.rdb.Eval(ctx, script, s.keys(keys), args...)
}

func (s prefixedScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.rdb.EvalSha(ctx, sha1, s.keys(keys), args...)
}

func (s prefixedScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.rdb.EvalRO(ctx, script, s.keys(keys), args...)
}

func (s prefixedScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.rdb.EvalShaRO(ctx, sha1, s.keys(keys), args...)
}

func (s prefixedScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.rdb.ScriptExists(ctx, hashes...)
}

func (s prefixedScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return s.rdb.ScriptLoad(ctx, script)
}

func (s prefixedScripter) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return s.rdb.Del(ctx, s.keys(keys)...)
}
