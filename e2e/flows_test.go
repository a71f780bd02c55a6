package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/api"
	"github.com/gpuorch/orchestrator/client"
)

// flowTypes are the job types of the flow tests: steps whose exec command answers with the
// parents it was handed (ORCH_PARENTS) or, without parents, with its payload, after a pause
// long enough for a leader to die while they run; fan-out children that answer with their job
// id; and a type an approval policy holds.
const flowTypes = `  step:
    handler: exec
    command: parents
  node_job:
    handler: exec
    command: node_job
  gated:
    handler: exec
    command: parents
`

// flowCommands are the commands of flowTypes (a shell, in the tests' configuration only).
const flowCommands = `    parents:
      argv: ["sh", "-c", "sleep 0.8; if [ -n \"$ORCH_PARENTS\" ]; then printf '{\"parents\":%s}' \"$ORCH_PARENTS\"; else cat; fi"]
    node_job:
      argv: ["sh", "-c", "sleep 1.5; printf '{\"job\":\"%s\"}' \"$ORCH_JOB_ID\""]
`

// newFlowCluster is a cluster with flowTypes and their commands, and extra configuration.
func newFlowCluster(t *testing.T, extra string) *cluster {
	t.Helper()
	c := newCluster(t, "")
	cfg := strings.Replace(baseConfig, "job_types:\n", "job_types:\n"+flowTypes, 1)
	cfg = strings.Replace(cfg, "  commands:\n", "  commands:\n"+flowCommands, 1)
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "config.yaml"), []byte(cfg+extra), 0o600))
	return c
}

// addTokens appends tokens of records to the cluster's tokens file and returns them, in order.
func (c *cluster) addTokens(recs ...api.TokenRecord) []string {
	c.t.Helper()
	path := filepath.Join(c.dir, "tokens")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(c.t, err)
	defer f.Close()
	var tokens []string
	for _, rec := range recs {
		token, line, err := api.NewToken(rec)
		require.NoError(c.t, err)
		_, err = fmt.Fprintln(f, line)
		require.NoError(c.t, err)
		tokens = append(tokens, token)
	}
	return tokens
}

// jobWith waits until job id has status, failing with its row after d.
func (c *cluster) jobWith(id, status string, d time.Duration) client.Job {
	c.t.Helper()
	return c.waitJob(id, d, func(j client.Job) bool { return j.Status == status })
}

// waitReadyNodes waits until every node of nodes is ready with a live worker of typ.
func (c *cluster) waitReadyNodes(typ string, nodes ...string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		list, err := c.api.ListNodes(context.Background())
		if err != nil {
			return false
		}
		ready := 0
		for _, n := range list.Nodes {
			if !slices.Contains(nodes, n.ID) || n.Status != "ready" {
				continue
			}
			for _, w := range n.Workers {
				if w.Status != "offline" && slices.Contains(w.Types, typ) {
					ready++
					break
				}
			}
		}
		return ready == len(nodes)
	}, time.Minute, 50*time.Millisecond, "nodes %v never all had a ready worker of %s", nodes, typ)
}

// TestFlowsSurviveLeaderKill: two orchestrators behind a failover proxy, three simulated nodes.
// A diamond workflow (a → b, c → d), a fan-out over the three nodes and a job held for
// approval are in flight when the leader is killed with SIGKILL; the other instance takes
// over, and everything ends as it would have: d ran after b and c with their results, the
// fan-out ran one child on each node and ended done with the three results, the held job ran
// only once approved (through the new leader's cluster), each job once.
func TestFlowsSurviveLeaderKill(t *testing.T) {
	t.Parallel()
	c := newFlowCluster(t, quickRescues+`
flows:
  resolve_interval: 500ms
approvals:
  expire_interval: 200ms
  refresh_interval: 200ms
  policies:
    - name: gated
      type: gated
      ttl: 10m
`)
	ann := c.addTokens(api.TokenRecord{Role: api.RoleApprover, Name: "ann"})[0]
	insts := []*instance{c.newInstance("orchestrator-a", c.addr), c.newInstance("orchestrator-b", freeAddr(t))}
	for _, o := range insts {
		c.startInstance(o)
		o.waitReady(t, time.Minute)
	}
	lb := newFailover(t, insts...)
	c.api = client.New(lb.url, c.adminToken)
	nodes := []string{"node-a", "node-b", "node-c"}
	for _, n := range nodes {
		c.startSimNode("worker-"+n, n, "24576", 4, "step,node_job,gated", "ORCH_API_URL="+lb.url)
	}
	c.waitReadyNodes("node_job", nodes...)
	first, st := c.waitLeader(insts, 0, 30*time.Second)
	ctx := context.Background()

	step := func(name string, needs ...string) client.WorkflowStep {
		return client.WorkflowStep{Name: name, Needs: needs, Type: "step", Payload: json.RawMessage(fmt.Sprintf(`{"step":%q}`, name))}
	}
	wf, err := c.api.SubmitWorkflow(ctx, client.WorkflowRequest{WorkflowID: "diamond", Agent: "e2e",
		Steps: []client.WorkflowStep{step("a"), step("b", "a"), step("c", "a"), step("d", "b", "c")}})
	require.NoError(t, err)
	require.True(t, wf.Created)
	fo, err := c.api.Submit(ctx, client.SubmitRequest{JobID: "fleet", Type: "node_job", Agent: "e2e", Payload: json.RawMessage(`{}`),
		FanOut: &client.FanOut{All: true}})
	require.NoError(t, err)
	require.Equal(t, "waiting", fo.Status)
	held, err := c.api.Submit(ctx, client.SubmitRequest{JobID: "held", Type: "gated", Agent: "e2e", Payload: json.RawMessage(`{"x":1}`)})
	require.NoError(t, err)
	require.Equal(t, "awaiting_approval", held.Status)

	// Mid-flight: a has run, b and c are about to or do, the fan-out's children run.
	c.jobWith("diamond.a", "done", time.Minute)
	survivor := other(insts, first)
	killedAt := time.Now()
	first.proc.kill()
	_, st2 := c.waitLeader([]*instance{survivor}, st.Leader.Term, time.Minute)
	t.Logf("leader %s killed; %s leads in term %d", first.name, survivor.name, st2.Leader.Term)
	require.Equal(t, "awaiting_approval", c.jobWith("held", "awaiting_approval", time.Second).Status, "never started unapproved")
	resp, err := client.New(lb.url, ann).ApproveJob(ctx, "held", "e2e says yes")
	require.NoError(t, err)
	require.Equal(t, "pending", resp.JobStatus)

	d := c.jobWith("diamond.d", "done", time.Minute)
	var got struct {
		Parents []client.Parent `json:"parents"`
	}
	require.NoError(t, json.Unmarshal(d.Result, &got), "%s", d.Result)
	require.Len(t, got.Parents, 2)
	for i, name := range []string{"b", "c"} {
		p := got.Parents[i]
		require.Equal(t, "diamond."+name, p.JobID)
		require.Equal(t, name, p.Step)
		require.Equal(t, "done", p.Status)
		require.Contains(t, string(p.Result), `"step":"a"`, "b and c saw a's result, and d theirs")
	}
	b := c.jobWith("diamond.b", "done", time.Second)
	require.False(t, d.StartedAt.Before(*b.FinishedAt), "d started after b ended")
	require.Eventually(t, func() bool {
		w, err := c.api.GetWorkflow(ctx, "diamond")
		return err == nil && w.Status == "done"
	}, time.Minute, 50*time.Millisecond, "the workflow ends done")

	parent := c.jobWith("fleet", "done", time.Minute)
	var result struct {
		Done  int `json:"done"`
		Nodes map[string]struct {
			JobID  string          `json:"job_id"`
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		} `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal(parent.Result, &result), "%s", parent.Result)
	require.Equal(t, 3, result.Done)
	require.Len(t, result.Nodes, 3)
	for _, n := range nodes {
		r := result.Nodes[n]
		require.Equal(t, "fleet."+n, r.JobID)
		require.JSONEq(t, fmt.Sprintf(`{"job":"fleet.%s"}`, n), string(r.Result))
		child, err := c.api.GetJob(ctx, r.JobID)
		require.NoError(t, err)
		require.Equal(t, "worker-"+n, child.WorkerID, "the child of %s ran there", n)
	}
	c.jobWith("held", "done", time.Minute)
	// Mid-flight indeed: the new leader released d and ended the fan-out.
	for _, ev := range []struct{ job, typ string }{{"diamond.d", "job.waiting->pending"}, {"fleet", "job.waiting->done"}} {
		var at time.Time
		require.NoError(t, c.db.QueryRow(`SELECT ts FROM orchestrator_audit WHERE job_id = ? AND event_type = ?`, ev.job, ev.typ).Scan(&at))
		require.True(t, at.After(killedAt), "%s %s at %s, after the kill at %s", ev.job, ev.typ, at, killedAt)
	}
	for id, n := range c.doneAuditCounts() {
		require.Equal(t, 1, n, "job %s done %d times", id, n)
	}
}

// TestApprovalFlow: a job an approval policy matches is held and never starts until approved;
// an agent's token cannot approve (403); two keys need two distinct approvers (the same one
// twice is refused) and orchctl decides as an approver does; a rejection cancels the job with
// the reason; a request nobody decides expires, rejected, with an event.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	c := newFlowCluster(t, `
approvals:
  expire_interval: 100ms
  refresh_interval: 200ms
  policies:
    - name: two-keys
      type: gated
      two_key: true
      ttl: 10m
    - name: quick
      type: step
      agent: hasty
      ttl: 2s
`)
	toks := c.addTokens(api.TokenRecord{Role: api.RoleApprover, Name: "ann"}, api.TokenRecord{Role: api.RoleApprover, Name: "ben"},
		api.TokenRecord{Role: api.RoleAgent, Agent: "e2e"})
	ann, ben, agent := client.New("http://"+c.addr, toks[0]), toks[1], client.New("http://"+c.addr, toks[2])
	c.startOrchestrator("orchestrator")
	c.startWorker("worker-1", "ORCH_WORKER_TYPES=gated,step")
	ctx := context.Background()

	for _, id := range []string{"two", "no"} {
		resp, err := agent.Submit(ctx, client.SubmitRequest{JobID: id, Type: "gated", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		require.Equal(t, "awaiting_approval", resp.Status)
	}
	_, err := agent.ApproveJob(ctx, "two", "my own job")
	require.True(t, client.IsStatus(err, http.StatusForbidden), "an agent cannot approve: %v", err)
	list, err := ann.ListApprovals(ctx, "")
	require.NoError(t, err)
	require.Len(t, list.Approvals, 2)

	resp, err := ann.ApproveJob(ctx, "two", "first key")
	require.NoError(t, err)
	require.Equal(t, "awaiting_approval", resp.JobStatus)
	_, err = ann.ApproveJob(ctx, "two", "first key again")
	require.True(t, client.IsStatus(err, http.StatusConflict), "the same approver twice: %v", err)
	require.Empty(t, c.strings(`SELECT event_type FROM orchestrator_audit WHERE job_id = 'two' AND event_type LIKE '%->claimed'`),
		"a held job never started")
	p := c.start("orchctl-approve", "orchctl", []string{"ORCH_API_URL=http://" + c.addr, "ORCH_API_TOKEN=" + ben},
		"approvals", "approve", "two", "--reason", "second key")
	<-p.done
	require.NoError(t, p.err, "orchctl approvals approve")
	c.jobWith("two", "done", time.Minute)

	_, err = ann.RejectJob(ctx, "no", "not today")
	require.NoError(t, err)
	no := c.jobWith("no", "cancelled", 5*time.Second)
	require.Equal(t, "rejected by approver:ann: not today", no.LastError)

	resp2, err := c.api.Submit(ctx, client.SubmitRequest{JobID: "late", Type: "step", Agent: "hasty", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, "awaiting_approval", resp2.Status)
	late := c.jobWith("late", "cancelled", 30*time.Second)
	require.Contains(t, late.LastError, "approval expired")
	require.Contains(t, c.auditTypes("late"), "job.approval_expired")
	require.Equal(t, []string{"job.approval_requested", "job.approved", "job.approved"},
		c.strings(`SELECT event_type FROM orchestrator_audit WHERE job_id = 'two' AND event_type LIKE 'job.approv%' ORDER BY id`))
	require.Equal(t, []string{"approver:ann", "approver:ben"},
		c.strings(`SELECT actor FROM orchestrator_audit WHERE job_id = 'two' AND event_type = 'job.approved' ORDER BY id`))
}
