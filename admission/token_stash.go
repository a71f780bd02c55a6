package admission

import (
	"sync"
	"time"

	"github.com/gpuorch/orchestrator/store"
)

// Batching of token-bucket calls. An agent allowed thousands of requests a second would cost
// its submits one Redis round trip each; instead an instance takes a few of its tokens at once
// (rate × stashWindow, at most a tenth of the burst) and hands them out locally. The tokens
// are debited from the shared bucket when taken, so the bucket is never overdrawn: what the
// batching changes is only when, within stashTTL, a taken token is used; tokens not used by
// then are dropped (the agent loses at most one batch per instance). A slow agent (batch of
// 1) is not batched at all, and neither is an agent whose bucket could not give a whole batch
// lately: near its limit every request asks Redis, so the limit stays exact.
const (
	stashWindow = 10 * time.Millisecond
	stashTTL    = 100 * time.Millisecond
)

// batchSize is how many tokens one call takes for policy p.
func batchSize(p store.AdmissionPolicy) int {
	return max(1, min(int(p.RatePerSec*stashWindow.Seconds()), p.Burst/10))
}

// tokenStash holds the tokens an instance took ahead of use, per bucket key. Safe for
// concurrent use.
type tokenStash struct {
	mu   sync.Mutex
	keys map[string]*stashed
}

type stashed struct {
	n           int       // tokens in hand
	expires     time.Time // when those are dropped
	fetching    bool      // a batch call for the key is under way
	singleUntil time.Time // the bucket was short of a batch: no batches until then
}

func newTokenStash() *tokenStash { return &tokenStash{keys: map[string]*stashed{}} }

// take returns 0 when it handed out a token in hand, or how many tokens the caller must ask
// Redis for: batch when no other batch call of the key is under way and the bucket was not
// short lately (the caller then reports with put), else 1.
func (s *tokenStash) take(key string, batch int, now time.Time) int {
	if batch <= 1 {
		return 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.keys[key]
	if st == nil {
		st = &stashed{}
		s.keys[key] = st
	}
	if st.n > 0 && now.Before(st.expires) {
		st.n--
		return 0
	}
	st.n = 0
	if st.fetching || now.Before(st.singleUntil) {
		return 1
	}
	st.fetching = true
	return batch
}

// put records the outcome of a batch call that asked for want tokens and got got (the one the
// caller uses included; 0 also for an error).
func (s *tokenStash) put(key string, want, got int, now time.Time) {
	if want <= 1 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.keys[key]
	if st == nil {
		return
	}
	st.fetching = false
	if got < want {
		st.singleUntil = now.Add(stashTTL)
	}
	if got > 1 {
		st.n, st.expires = got-1, now.Add(stashTTL)
	}
}

// sweep forgets the keys that hold nothing (the refresher calls it), so that the map does not
// keep every agent and policy ever seen.
func (s *tokenStash) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, st := range s.keys {
		if !st.fetching && (st.n == 0 || !now.Before(st.expires)) && !now.Before(st.singleUntil) {
			delete(s.keys, key)
		}
	}
}
