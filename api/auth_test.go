package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/wire"
)

// authRoute is one route of the auth table; path and body may depend on the bundle (a fresh job
// of alice's for the routes that address one).
type authRoute struct {
	name   string
	method string
	path   func(t *testing.T, b *bundle) string
	body   any
	// want maps a caller to its status; callers left out get 401 ("", "unknown") or 403.
	want map[string]int
}

func fixed(p string) func(*testing.T, *bundle) string {
	return func(*testing.T, *bundle) string { return p }
}

// aliceJob makes a new job of alice's for the real stack, and a dummy id for the down stack.
func aliceJob(suffix string) func(*testing.T, *bundle) string {
	return func(t *testing.T, b *bundle) string {
		if _, down := b.st.(downStore); down {
			return "/jobs/j-none" + suffix
		}
		return "/jobs/" + b.submitJob(t, "alice") + suffix
	}
}

var authRoutes = []authRoute{
	{"Submit", http.MethodPost, fixed("/jobs/submit"), wire.SubmitRequest{Type: "noop", Agent: "alice", Payload: []byte(`{}`)},
		map[string]int{"alice": 202, "admin": 202}},
	{"GetJob", http.MethodGet, aliceJob(""), nil, map[string]int{"alice": 200, "admin": 200}},
	{"ListJobs", http.MethodGet, fixed("/jobs"), nil, map[string]int{"alice": 200, "admin": 200}},
	{"CancelJob", http.MethodPost, aliceJob("/cancel"), nil, map[string]int{"alice": 200, "admin": 200}},
	{"Claim", http.MethodPost, fixed("/internal/jobs/claim"), wire.ClaimRequest{WorkerID: "w1", Jobs: []wire.ClaimItem{}},
		map[string]int{"worker": 200, "admin": 200}},
	{"Start", http.MethodPost, fixed("/internal/jobs/start"), wire.StartRequest{WorkerID: "w1", JobIDs: []string{}},
		map[string]int{"worker": 200, "admin": 200}},
	{"Complete", http.MethodPost, fixed("/internal/jobs/complete"), wire.CompleteRequest{WorkerID: "w1", Results: []wire.JobResult{}},
		map[string]int{"worker": 200, "admin": 200}},
	{"Healthz", http.MethodGet, fixed("/healthz"), nil, map[string]int{"": 200, "unknown": 200, "alice": 200, "worker": 200, "admin": 200}},
	{"Readyz", http.MethodGet, fixed("/readyz"), nil, map[string]int{"": 200, "unknown": 200, "alice": 200, "worker": 200, "admin": 200}},
	{"Metrics", http.MethodGet, fixed("/metrics"), nil, map[string]int{"": 200, "unknown": 200, "alice": 200, "worker": 200, "admin": 200}},
}

var (
	authCallers = []string{"", "unknown", "alice", "worker", "admin"}
	callerNames = map[string]string{"": "NoToken", "unknown": "UnknownToken", "alice": "Agent", "worker": "Worker", "admin": "Admin"}
)

func wantStatus(r authRoute, who string) int {
	if s, ok := r.want[who]; ok {
		return s
	}
	if who == "" || who == "unknown" {
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

// runAuthTable sends every route as every caller; onlyRejections limits it to the cases that
// must be answered before the engine is reached (401, 403) and to routes without dependencies.
func runAuthTable(t *testing.T, b *bundle, onlyRejections bool) {
	for _, r := range authRoutes {
		for _, who := range authCallers {
			want := wantStatus(r, who)
			engineFree := want == 401 || want == 403 || r.name == "Healthz" || r.name == "Metrics"
			if onlyRejections && !engineFree {
				continue
			}
			t.Run(r.name+"As"+callerNames[who], func(t *testing.T) {
				t.Parallel()
				caller := who
				if caller == "unknown" {
					caller = "orch_not-a-configured-token"
				}
				rec := b.request(t, r.method, r.path(t, b), caller, r.body)
				require.Equal(t, want, rec.Code, "body: %s", rec.Body.String())
				switch want {
				case 401:
					requireError(t, rec, want, CodeUnauthorized, "")
					require.True(t, strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer"))
				case 403:
					requireError(t, rec, want, CodeForbidden, "")
				}
			})
		}
	}
}

func TestAuthRejectionsWithoutDatabase(t *testing.T) {
	t.Parallel()
	runAuthTable(t, setupDown(t), true)
}

func TestAuthTable(t *testing.T) {
	t.Parallel()
	runAuthTable(t, setup(t), false)
}

func TestAuthAgentBinding(t *testing.T) {
	t.Parallel()
	b := setupDown(t)

	t.Run("SubmitForAnotherAgent", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodPost, "/jobs/submit", "alice",
			wire.SubmitRequest{Type: "noop", Agent: "bob", Payload: []byte(`{}`)})
		requireError(t, rec, http.StatusForbidden, CodeForbidden, "")
	})
	t.Run("ListAnotherAgent", func(t *testing.T) {
		t.Parallel()
		rec := b.request(t, http.MethodGet, "/jobs?agent=bob", "alice", nil)
		requireError(t, rec, http.StatusForbidden, CodeForbidden, "")
	})
	t.Run("SchemeIsCaseInsensitive", func(t *testing.T) {
		t.Parallel()
		req := httptest.NewRequest(http.MethodGet, "/jobs?status=bogus", nil)
		req.Header.Set("Authorization", "bearer "+b.tokens["admin"])
		rec := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(rec, req)
		requireError(t, rec, http.StatusBadRequest, CodeInvalidRequest, "status") // past auth
	})
	t.Run("BasicSchemeIsRejected", func(t *testing.T) {
		t.Parallel()
		req := httptest.NewRequest(http.MethodGet, "/jobs", nil)
		req.Header.Set("Authorization", "Basic "+b.tokens["admin"])
		rec := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(rec, req)
		requireError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
	})
}

func TestAuthAgentSeesOnlyOwnJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bobs := b.submitJob(t, "bob")

	rec := b.request(t, http.MethodGet, "/jobs/"+bobs, "alice", nil)
	requireError(t, rec, http.StatusNotFound, CodeNotFound, "")
	rec = b.request(t, http.MethodPost, "/jobs/"+bobs+"/cancel", "alice", nil)
	requireError(t, rec, http.StatusNotFound, CodeNotFound, "")
	rec = b.request(t, http.MethodGet, "/jobs/"+bobs, "bob", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "pending", decode[wire.Job](t, rec).Status, "alice's cancel must not have applied")

	list := decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs", "alice", nil))
	require.Empty(t, list.Jobs)
	list = decode[wire.JobList](t, b.request(t, http.MethodGet, "/jobs", "admin", nil))
	require.Len(t, list.Jobs, 1)
}

// TestAuthNoTokensConfigured covers a server with an empty token set, with and without the dev
// mode that lets loopback requests in as admin.
func TestAuthNoTokensConfigured(t *testing.T) {
	t.Parallel()
	down := setupDown(t)
	serve := func(auth AuthOptions, remote string) *httptest.ResponseRecorder {
		srv := New(down.with(Options{Auth: auth, Logger: slog.New(slog.DiscardHandler)}))
		req := httptest.NewRequest(http.MethodGet, "/jobs?limit=0", nil)
		req.RemoteAddr = remote
		req.Host = "127.0.0.1:8080"
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		rec := serve(AuthOptions{}, "127.0.0.1:5000")
		d := requireError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
		require.Contains(t, d.Message, "orchestrator token create --role admin")
	})
	t.Run("LoopbackIsAdmin", func(t *testing.T) {
		t.Parallel()
		for _, remote := range []string{"127.0.0.1:5000", "[::1]:5000"} {
			rec := serve(AuthOptions{AllowUnauthenticatedLoopback: true}, remote)
			requireError(t, rec, http.StatusBadRequest, CodeInvalidRequest, "limit") // past auth
		}
	})
	t.Run("RemoteIsRefused", func(t *testing.T) {
		t.Parallel()
		rec := serve(AuthOptions{AllowUnauthenticatedLoopback: true}, "192.0.2.7:5000")
		requireError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
	})
	t.Run("ConfiguredTokensWin", func(t *testing.T) {
		t.Parallel()
		set, _ := testTokens(t)
		rec := serve(AuthOptions{Tokens: set, AllowUnauthenticatedLoopback: true}, "127.0.0.1:5000")
		requireError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
	})
}

func TestIdentityActor(t *testing.T) {
	t.Parallel()
	require.Equal(t, "agent:alice", Identity{Role: RoleAgent, Agent: "alice", TokenID: "0123abcd"}.Actor())
	require.Equal(t, "admin:0123abcd", Identity{Role: RoleAdmin, TokenID: "0123abcd"}.Actor())
	require.Equal(t, "worker:0123abcd", Identity{Role: RoleWorker, TokenID: "0123abcd"}.Actor())
}
