package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/store"
	"github.com/gpuorch/orchestrator/wire"
)

func TestSubmitIsIdempotentOnJobID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := wire.SubmitRequest{JobID: "job-1", Type: "noop", Agent: "alice", Payload: []byte(`{"n":1}`)}

	rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", body)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	first := decode[wire.SubmitResponse](t, rec)
	require.Equal(t, wire.SubmitResponse{JobID: "job-1", Status: "pending", Created: true}, first)

	body.Payload = []byte(`{ "n" : 1.0 }`) // a repeat of the request returns the existing job
	rec = b.request(t, http.MethodPost, "/jobs/submit", "alice", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, wire.SubmitResponse{JobID: "job-1", Status: "pending", Created: false}, decode[wire.SubmitResponse](t, rec))
	require.Equal(t, 1, b.countJobs(t, "alice"))

	var job wire.Job
	require.Eventually(t, func() bool { // the enqueued mark follows the submit's answer
		job = decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/job-1", "alice", nil))
		return job.Enqueued
	}, 5*time.Second, 20*time.Millisecond, "published to the stream after the commit")
	require.JSONEq(t, `{"n":1}`, string(job.Payload))
	require.Equal(t, "noop", job.Type)
	require.Equal(t, "pending", job.Status)
	require.NotEmpty(t, job.StreamID)
	require.Equal(t, 3, job.MaxAttempts, "the type's default")

	t.Run("SameRequestWithTheDefaultsNamed", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice",
			`{"job_id":"job-1","type":"noop","payload":{"n":1},"max_attempts":3,"timeout":"`+time.Duration(job.Timeout).String()+`"}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	})
	// A resubmit of the id with another request is refused, naming the first field that
	// differs; nothing changes.
	for name, c := range map[string]struct{ body, field string }{
		"Payload":        {`{"job_id":"job-1","type":"noop","payload":{"n":2}}`, "payload"},
		"PayloadKeys":    {`{"job_id":"job-1","type":"noop","payload":{"n":1,"m":1}}`, "payload"},
		"Type":           {`{"job_id":"job-1","type":"sleep","payload":{"n":2}}`, "type"},
		"MaxAttempts":    {`{"job_id":"job-1","type":"noop","payload":{"n":1},"max_attempts":4}`, "max_attempts"},
		"Timeout":        {`{"job_id":"job-1","type":"noop","payload":{"n":1},"timeout":"1h"}`, "timeout"},
		"FirstDiffering": {`{"job_id":"job-1","type":"noop","payload":{"n":3},"timeout":"1h"}`, "payload"},
	} {
		t.Run("Mismatch"+name, func(t *testing.T) {
			t.Parallel()
			rec := b.request(t, http.MethodPost, "/jobs/submit", "alice", c.body)
			e := requireError(t, rec, http.StatusConflict, CodeIdempotencyMismatch, c.field)
			require.Contains(t, e.Message, "job-1")
			got := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/job-1", "alice", nil))
			require.JSONEq(t, `{"n":1}`, string(got.Payload))
			require.Equal(t, 3, got.MaxAttempts)
		})
	}

	t.Run("OtherAgentsJobIDIsAConflict", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "bob",
			wire.SubmitRequest{JobID: "job-1", Type: "noop", Payload: []byte(`{}`)})
		requireError(t, rec, http.StatusConflict, CodeConflict, "")
		require.Zero(t, b.countJobs(t, "bob"))
	})
}

func TestGetJobNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	requireError(t, b.request(t, http.MethodGet, "/jobs/nope", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodGet, "/jobs/bad%20id", "admin", nil), http.StatusNotFound, CodeNotFound, "")
	requireError(t, b.request(t, http.MethodPost, "/jobs/nope/cancel", "admin", nil), http.StatusNotFound, CodeNotFound, "")
}

func TestListJobsPaginates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string]bool{}
	for range 7 {
		want[b.submitJob(t, "alice")] = true
	}
	b.submitJob(t, "bob")

	var (
		seen   []wire.Job
		cursor string
		pages  int
	)
	for {
		q := url.Values{"agent": {"alice"}, "limit": {"3"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		rec := b.request(t, http.MethodGet, "/jobs?"+q.Encode(), "admin", nil)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		page := decode[wire.JobList](t, rec)
		require.LessOrEqual(t, len(page.Jobs), 3)
		seen = append(seen, page.Jobs...)
		pages++
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
		require.Less(t, pages, 10, "the cursor must make progress")
	}
	require.Equal(t, 3, pages)
	require.Len(t, seen, 7)
	for i, j := range seen {
		require.True(t, want[j.JobID], "job %s is not alice's", j.JobID)
		delete(want, j.JobID)
		if i > 0 {
			prev := seen[i-1]
			require.False(t, j.CreatedAt.After(prev.CreatedAt), "newest first")
		}
	}

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		list := decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs?status=pending&type=noop", "bob", nil))
		require.Len(t, list.Jobs, 1, "an agent token lists its own jobs only")
		list = decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs?status=done", "admin", nil))
		require.Empty(t, list.Jobs)
		require.NotNil(t, list.Jobs, "an empty page is [] not null")
		list = decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs?limit=2", "admin", nil))
		require.Len(t, list.Jobs, 2)
		require.NotEmpty(t, list.NextCursor)
	})
	t.Run("PageLargerThanASlice", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		want := map[string]bool{}
		for range listSlice + 5 {
			want[b.submitJob(t, "carol")] = true
		}
		page := decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs?agent=carol&limit="+strconv.Itoa(listSlice+3), "admin", nil))
		require.Len(t, page.Jobs, listSlice+3)
		require.NotEmpty(t, page.NextCursor)
		rest := decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs?agent=carol&limit=50&cursor="+page.NextCursor, "admin", nil))
		require.Len(t, rest.Jobs, 2)
		require.Empty(t, rest.NextCursor)
		for _, j := range append(page.Jobs, rest.Jobs...) {
			require.True(t, want[j.JobID], "job %s listed twice or not carol's", j.JobID)
			delete(want, j.JobID)
		}
	})
	t.Run("ExactPageHasNoCursor", func(t *testing.T) {
		t.Parallel()
		list := decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs?agent=alice&limit=7", "admin", nil))
		require.Len(t, list.Jobs, 7)
		require.Empty(t, list.NextCursor)
	})
}

func TestListJobsBadQuery(t *testing.T) {
	t.Parallel()
	b := setupDown(t)
	for _, c := range []struct{ name, query, field string }{
		{"UnknownStatus", "status=finished", "status"},
		{"LimitZero", "limit=0", "limit"},
		{"LimitHuge", fmt.Sprintf("limit=%d", ListLimitMax+1), "limit"},
		{"LimitNotANumber", "limit=ten", "limit"},
		{"CursorNotBase64", "cursor=***", "cursor"},
		{"CursorNotOurs", "cursor=" + url.QueryEscape("aGVsbG8"), "cursor"},
		{"BadAgent", "agent=a%20b", "agent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			requireError(t, b.request(t, http.MethodGet, "/jobs?"+c.query, "admin", nil), http.StatusBadRequest, CodeInvalidRequest, c.field)
		})
	}
}

func TestCancelJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submitJob(t, "alice")

	rec := b.request(t, http.MethodPost, "/jobs/"+id+"/cancel", "alice", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	job := decode[wire.Job](t, rec)
	require.Equal(t, "cancelled", job.Status)
	require.NotNil(t, job.FinishedAt)

	rec = b.request(t, http.MethodPost, "/jobs/"+id+"/cancel", "admin", nil)
	d := requireError(t, rec, http.StatusConflict, CodeJobTerminal, "")
	// The client names the operation ("cancel job X: 409 job_terminal: …"): the message does not.
	require.Equal(t, "job is in a terminal state: cancelled", d.Message)

	got := decode[wire.Job](t, b.request(t, http.MethodGet, "/jobs/"+id, "admin", nil))
	require.Equal(t, "cancelled", got.Status)
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 4, 5, 6, 7, 891011000, time.UTC)
	cur, err := decodeCursor(encodeCursor(store.Job{ID: "j:1.a-b_c", CreatedAt: at.In(time.FixedZone("x", 3600))}))
	require.NoError(t, err)
	require.Equal(t, &store.JobCursor{CreatedAt: at, ID: "j:1.a-b_c"}, cur)
	for _, bad := range []string{"", "!!", "MTIz", "eCxqb2I"} { // "", junk, "123", "x,job"
		_, err := decodeCursor(bad)
		require.Error(t, err, bad)
	}
}
