#!/usr/bin/env bash
# runbook-check: runs the procedures of docs/runbook.md with the real binaries against a real
# stack, and checks what each procedure says to look for (exit codes, states, counts).
#
# The stack: a private redis-server (so that Redis can really be killed and come back empty),
# two `orchestrator serve` instances on a fresh MariaDB database of the test server
# (ORCH_TEST_MYSQL_DSN, default root@tcp(127.0.0.1:3306)/), local worker pools started by the
# leader, simulated GPUs. Everything is removed at the end; on a failure the logs are kept and
# their tails printed. Needs MariaDB running (`make services`), redis-server, jq and curl.
#
# The procedures keep the runbook's numbers but run in the order in which each leaves the stack
# as the next needs it (the drain leaves the cluster without workers, so the jobs queued for the
# Redis loss wait in Redis; the dead leader comes late, as it kills a host's workers). Steps that
# cannot run here are reported as SKIPPED with the reason.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/orch-runbook.XXXXXX")
BIN=$WORK/bin
LOGS=$WORK/logs
mkdir -p "$BIN" "$LOGS"
START=$SECONDS
PGIDS=()    # process groups of the orchestrators we started (each with its local workers)
REDIS_PID=
SKIPPED=()
FAILED=

step() { printf '\n== %s  [%ds]\n' "$*" $((SECONDS - START)); }
ok() { printf '   ok: %s\n' "$*"; }
skip() { printf '   SKIPPED: %s\n' "$*"; SKIPPED+=("$*"); }
fail() {
  FAILED=1
  printf '\nrunbook-check FAILED: %s\n' "$*" >&2
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    printf -- '---- %s (last 25 lines) ----\n' "$(basename "$f")" >&2
    tail -n 25 "$f" >&2 || true
  done
  printf 'logs kept in %s\n' "$LOGS" >&2
  exit 1
}

# ---- prerequisites -----------------------------------------------------------------------
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
for tool in jq curl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "runbook-check: installing $tool"
    as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$tool" >/dev/null
  fi
done
command -v redis-server >/dev/null || fail "redis-server is missing: run \`make services\`"
command -v mysql >/dev/null || fail "the mysql client is missing: run \`make services\`"

SERVER_DSN=${ORCH_TEST_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/}
[[ $SERVER_DSN =~ ^([^:@]*)(:([^@]*))?@tcp\(([^:\)]+)(:([0-9]+))?\) ]] ||
  fail "cannot read user and address from ORCH_TEST_MYSQL_DSN=$SERVER_DSN"
MY_USER=${BASH_REMATCH[1]} MY_PASS=${BASH_REMATCH[3]} MY_HOST=${BASH_REMATCH[4]} MY_PORT=${BASH_REMATCH[6]:-3306}
DB=runbook_$(date +%s)_$RANDOM
DSN="${SERVER_DSN%/*}/$DB?parseTime=true"
sql() { MYSQL_PWD="$MY_PASS" mysql -h "$MY_HOST" -P "$MY_PORT" -u "$MY_USER" -N -B -e "$1"; }
sql 'SELECT 1' >/dev/null 2>&1 || fail "MariaDB does not answer at $MY_HOST:$MY_PORT: run \`make services\`"

cleanup() {
  set +e
  for pg in "${PGIDS[@]}"; do kill -TERM -- "-$pg" 2>/dev/null; done
  sleep 0.5 # a moment for a clean exit before the SIGKILL
  for pg in "${PGIDS[@]}"; do kill -KILL -- "-$pg" 2>/dev/null; done
  [ -n "$REDIS_PID" ] && kill -KILL "$REDIS_PID" 2>/dev/null
  sql "DROP DATABASE IF EXISTS \`$DB\`" >/dev/null 2>&1
  if [ -z "$FAILED" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

# ---- helpers -----------------------------------------------------------------------------

# free_port prints a loopback port nothing listens on.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
}

# until_ok SECS DESC CMD...: runs CMD every 200ms until it succeeds, failing after SECS. The
# arguments are expanded once: a check that computes them anew each time goes in eval '...'.
until_ok() {
  local secs=$1 desc=$2
  shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "not within ${secs}s: $desc"
    sleep 0.2 # polling interval
  done
}

# oc runs orchctl against $API with $ADMIN, as an operator would with ORCH_API_URL/ORCH_API_TOKEN.
oc() { ORCH_API_URL="$API" ORCH_API_TOKEN="$ADMIN" "$BIN/orchctl" "$@"; }

# expect CODE ARGS...: runs orchctl and requires the exit code; its output is left in $OUT/$ERR.
expect() {
  local want=$1 got
  shift
  set +e
  oc "$@" >"$WORK/out" 2>"$WORK/err"
  got=$?
  set -e
  OUT=$(cat "$WORK/out")
  ERR=$(cat "$WORK/err")
  [ "$got" -eq "$want" ] || fail "orchctl $*: exit $got, want $want
--- stdout:
$OUT
--- stderr:
$ERR"
}

# q FILTER ARGS...: runs orchctl -o json ARGS and jq -e FILTER on its document (true/false exit).
q() {
  local filter=$1
  shift
  oc -o json "$@" | jq -e "$filter" >/dev/null
}

# val FILTER ARGS...: prints jq -r FILTER of orchctl -o json ARGS.
val() {
  local filter=$1
  shift
  oc -o json "$@" | jq -r "$filter"
}

has() { grep -q -- "$2" <<<"$1" || fail "expected \"$2\" in:
$1"; }

mktoken() { "$BIN/orchestrator" token create "$@" 2>/dev/null; }
token_of() { sed -n 's/^token: //p' <<<"$1"; }
line_of() { sed -n 's/^tokens file line: //p' <<<"$1"; }

declare -A ORCH_PID ORCH_ADDR

# start_orch NAME: starts `orchestrator serve` NAME in a process group of its own (its local
# workers join it), with the current worker token for the workers it starts.
start_orch() {
  local name=$1
  ORCH_HTTP_ADDR=${ORCH_ADDR[$name]} ORCH_API_TOKEN=$WORKER_TOKEN \
    setsid "$BIN/orchestrator" serve >>"$LOGS/$name.log" 2>&1 &
  ORCH_PID[$name]=$!
  PGIDS+=("$!")
  disown "$!"
  until_ok 60 "orchestrator $name ready" curl -fsS "http://${ORCH_ADDR[$name]}/readyz"
}

# alive PID: the process exists and is not a zombie.
alive() { [ -e "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) Z ' "/proc/$1/stat" 2>/dev/null; }

# stop_orch NAME: SIGTERM, then waits for the exit (its local workers live on).
stop_orch() {
  local name=$1 pid=${ORCH_PID[$1]}
  kill -TERM "$pid"
  until_ok 30 "orchestrator $name exits on SIGTERM" eval "! alive $pid"
}

# leader_name prints the name of the instance that leads (its pid ends the leader id).
leader_name() {
  local id name
  id=$(val '.cluster.leader.leader_id // ""' status)
  for name in "${!ORCH_PID[@]}"; do
    if [[ $id == *"-${ORCH_PID[$name]}" ]]; then echo "$name"; return; fi
  done
}

pool_is() { q ".status == \"$2\"" pools get "$1"; }
jobs_count() { val '.jobs | length' jobs list --all "$@"; }
# in_flight TYPE: the jobs of TYPE a worker holds (claimed, or running once its start is reported).
in_flight() { echo $(($(jobs_count --status claimed --type "$1") + $(jobs_count --status running --type "$1"))); }
recoveries() {
  curl -fsS "$1/metrics" | awk '/^gpu_orchestrator_redis_recoveries_total/ {s += $2} END {print s + 0}'
}
# active_cpu_leases URL: the cpu leases active, in lease rows and in job rows (a job without a
# GPU holds its lease in its row, which `leases list` does not show).
active_cpu_leases() {
  curl -fsS "$1/metrics" | awk '/^gpu_orchestrator_leases_active\{mode="cpu"\}/ {s += $2; n++} END {print n ? s : "absent"}'
}

# ---- the stack ---------------------------------------------------------------------------
step "build the binaries and start the stack (MariaDB database $DB)"
go build -o "$BIN/" ./cmd/orchestrator ./cmd/worker ./cmd/orchctl || fail "go build failed"

REDIS_PORT=$(free_port)
start_redis() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
    >>"$LOGS/redis.log" 2>&1 &
  REDIS_PID=$!
  disown "$REDIS_PID" # killed on purpose later: no "Killed" notice from bash
  until_ok 20 "redis answers" redis-cli -p "$REDIS_PORT" ping
}
start_redis

out=$(mktoken --role admin)
ADMIN=$(token_of "$out") ADMIN_LINE=$(line_of "$out")
out=$(mktoken --role worker)
WORKER_TOKEN=$(token_of "$out") WORKER_LINE=$(line_of "$out")
TOKENS=$WORK/tokens
printf '%s\n%s\n' "$ADMIN_LINE" "$WORKER_LINE" >"$TOKENS"

# The handler DLQ replay fixes: fails until the fix is deployed.
FLAKY=$WORK/flaky.sh
printf '#!/bin/sh\necho "upstream unavailable" >&2\nexit 3\n' >"$FLAKY"
chmod +x "$FLAKY"

NODE=runbook-node
cat >"$WORK/config.yaml" <<EOF
dispatch_interval: 200ms
shutdown_grace: 5s
claim_idle: 2s
reclaim_interval: 500ms
leases:
  ttl: 3s
  purge_interval: 500ms
telemetry:
  sim_gpus: "2x24576"
  poll_interval: 500ms
admission:
  gpu_high_watermark_pct: 70
  gpu_low_watermark_pct: 50
  gpu_hold: 1s
  refresh_interval: 200ms
pools:
  provisioner: local
  heartbeat_interval: 200ms
  offline_heartbeats: 3
  reconcile_interval: 300ms
  drain_grace: 30s
  evict_grace: 2s
  restart_backoff_max: 2s
job_types:
  noop: {}
  sleep: {}
  gpu_sleep:
    handler: sleep
    gpu_memory_mb: 10000
  flaky:
    handler: exec
    command: flaky
    max_attempts: 1
worker:
  concurrency: 8
  block: 200ms
  commands:
    flaky:
      argv: ["$FLAKY"]
EOF
export ORCH_CONFIG=$WORK/config.yaml ORCH_MYSQL_DSN=$DSN ORCH_REDIS_ADDR=127.0.0.1:$REDIS_PORT
export ORCH_TOKENS_FILE=$TOKENS ORCH_NODE_ID=$NODE ORCH_DATA_DIR=$WORK/data ORCH_LOG_LEVEL=info
unset ORCH_API_URL ORCH_API_TOKEN ORCH_REDIS_PREFIX

ORCH_ADDR[a]=127.0.0.1:$(free_port)
ORCH_ADDR[b]=127.0.0.1:$(free_port)
API=http://${ORCH_ADDR[a]}
start_orch a
until_ok 30 "orchestrator a leads" q '.cluster.this_instance_leads' status
start_orch b
expect 0 status
has "$OUT" "READYZ *ok"
ok "a leads in term $(val .cluster.leader.term status); b follows"

# ---- 1. Force-evict a pool ---------------------------------------------------------------
step "1. force-evict a pool"
expect 0 pools create batch --agent ops --model m --types sleep --workers 1
until_ok 60 "pool batch running" pool_is batch running
for i in 1 2 3; do expect 0 jobs submit --type sleep --agent ops --payload '{"ms": 60000}' --job-id "evict-$i" -q; done
until_ok 60 "the 3 jobs in flight" eval '[ "$(in_flight sleep)" = 3 ]'
expect 0 pools evict batch --wait --wait-timeout 60s --poll 200ms
has "$OUT" "batch *evicted *0/1 *yes"
ok "pools evict --wait: exit 0, evicted, no live worker"
until_ok 30 "no job of the pool in flight" eval '[ "$(in_flight sleep)" = 0 ]'
for i in 1 2 3; do
  until_ok 20 "evict-$i back to pending" q '.status == "pending" and .attempts == 1' jobs get "evict-$i"
  q '.leases | length == 0' leases list --job "evict-$i" --status active || fail "evict-$i still holds an active lease"
done
ok "the jobs are pending again after one attempt, with no active lease ($(val .last_error jobs get evict-1))"
expect 1 pools scale batch 1
has "$ERR" "add --restart"
expect 0 pools scale batch 0 --restart
has "$OUT" "restarted"
ok "pools scale without --restart refuses (exit 1); with --restart the pool starts again"
for i in 1 2 3; do expect 0 jobs cancel "evict-$i"; done

# ---- 4. GPU out-of-memory emergency ------------------------------------------------------
step "4. GPU out-of-memory emergency"
expect 0 pools create gpu --agent ops --model llm --types gpu_sleep --workers 1
until_ok 60 "pool gpu running" pool_is gpu running
grant=$(curl -fsS -X POST "$API/leases" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
  -d '{"agent": "trainer", "min_memory_mb": 1, "mode": "gpu", "exclusive": true, "ttl_seconds": 600}')
LEASE=$(jq -r .token <<<"$grant")
LEASE_GPU=$(jq -r .gpu_index <<<"$grant")
for i in 1 2; do expect 0 jobs submit --type gpu_sleep --agent ops --payload '{"ms": 60000}' --job-id "oom-$i" -q; done
until_ok 60 "both GPU jobs in flight" eval '[ "$(in_flight gpu_sleep)" = 2 ]'
until_ok 30 "the GPU gate closes" q '.gpu_pressure.state == "closed"' admission get
expect 2 jobs submit --type gpu_sleep --agent ops
has "$ERR" "429 gpu_pressure"
ok "GPUs full: the gate is closed, GPU submits are refused 429 gpu_pressure"

oc -o json admission get >"$WORK/admission-before.json"
expect 0 admission set --all-agents --rate 0.001 --burst 1 --enabled=true
has "$OUT" '^\* .* set$'
ok "admission set --all-agents: every agent throttled"
expect 0 gpus
has "$OUT" "$NODE"
q '[.gpus[].memory_reserved_mb] | add >= 44000' gpus || fail "gpus does not show the reservations"
ok "gpus shows what the leases reserve ($(val '[.gpus[].memory_reserved_mb] | add' gpus) MiB)"
expect 0 pools evict gpu --wait --wait-timeout 60s --poll 200ms
has "$OUT" "gpu *evicted"
expect 0 leases release --all --node "$NODE" --gpu "$LEASE_GPU"
has "$OUT" "$LEASE .*released"
ok "the GPU pool evicted, the agent's lease on GPU $LEASE_GPU released"
until_ok 20 "no memory reserved" q '[.gpus[].memory_reserved_mb] | add == 0' gpus
until_ok 20 "the GPU gate reopens" q '.gpu_pressure.state == "open"' admission get
ok "RESERVED back to 0, the gate open again"
expect 0 admission restore "$WORK/admission-before.json"
has "$OUT" '^\* .* deleted$'
q '.default_source == "config" and (.policies | length == 0)' admission get || fail "admission not restored"
ok "admission restore: the configured default applies again"
for i in 1 2; do expect 0 jobs cancel "oom-$i"; done

# ---- 9. Cordon a node for maintenance -----------------------------------------------------
step "9. cordon a node for maintenance"
expect 0 pools scale gpu 1 --restart
until_ok 60 "pool gpu running" pool_is gpu running
expect 0 jobs submit --type gpu_sleep --agent ops --payload '{"ms": 3000}' --job-id cordon-run -q
until_ok 60 "cordon-run in flight" eval '[ "$(in_flight gpu_sleep)" = 1 ]'
expect 0 nodes list
has "$OUT" "$NODE *ready"
expect 0 nodes cordon "$NODE" --reason "runbook check"
has "$OUT" "$NODE *cordoned"
ok "nodes cordon: exit 0, cordoned"
expect 0 jobs submit --type gpu_sleep --agent ops --payload '{"ms": 100}' --job-id cordon-wait -q
until_ok 20 "cordon-wait waits for the cordon" q '.status == "pending" and (.waiting_reason | startswith("cordoned:"))' jobs get cordon-wait
expect 0 jobs wait cordon-run --wait-timeout 60s --poll 200ms
q '.status == "pending"' jobs get cordon-wait || fail "cordon-wait ran on the cordoned node"
ok "a new GPU job waits cordoned:, the running one finished"
expect 0 nodes uncordon "$NODE"
has "$OUT" "$NODE *ready"
expect 0 jobs wait cordon-wait --wait-timeout 60s --poll 200ms
[ "$(sql "SELECT COUNT(*) FROM \`$DB\`.orchestrator_audit WHERE event_type IN ('node.cordoned', 'node.uncordoned')")" = 2 ] ||
  fail "the cordon and uncordon are not audited"
ok "nodes uncordon: exit 0, ready; the waiting job ran; both audited"
expect 0 pools evict gpu --wait --wait-timeout 60s --poll 200ms

# ---- 7. Replay the dead-letter queue after a fix -----------------------------------------
step "7. replay the dead-letter queue after a fix"
expect 0 pools create tools --agent ops --model m --types flaky,noop,sleep --workers 1
until_ok 60 "pool tools running" pool_is tools running
for i in 1 2 3; do expect 0 jobs submit --type flaky --agent ops --payload "{\"n\": $i}" --job-id "dlq-$i" -q; done
expect 3 jobs wait dlq-1 dlq-2 dlq-3 --wait-timeout 60s --poll 200ms
ok "jobs wait: exit 3, the jobs are dead letters"
expect 0 dlq list --type flaky --error-contains "upstream unavailable"
[ "$(grep -c '^dlq-' <<<"$OUT")" = 3 ] || fail "dlq list does not show the 3 dead letters: $OUT"
ok "dlq list shows them with their last error"
printf '#!/bin/sh\ncat\n' >"$FLAKY.new" && chmod +x "$FLAKY.new" && mv "$FLAKY.new" "$FLAKY" # the fix
expect 0 dlq replay --all --type flaky --error-contains "upstream unavailable" --wait --wait-timeout 60s --poll 200ms
[ "$(grep -c '^dlq-.* done ' <<<"$OUT")" = 3 ] || fail "the replayed jobs are not all done: $OUT"
expect 0 dlq list --type flaky
has "$ERR" "no dead letters"
ok "dlq replay --all --wait: exit 0, every job done, the queue empty"

# ---- 10. A schedule skips, or stopped firing ----------------------------------------------
step "10. a schedule skips, or stopped firing"
expect 0 schedules create rb-tick --cron "@every 1s" --type sleep --agent ops --payload '{"ms": 2500}' --max-concurrent 1
until_ok 30 "rb-tick skips an overlap" q '.last_skip.reason == "overlap"' schedules get rb-tick
expect 0 schedules get rb-tick
has "$OUT" "LAST SKIP .* overlap"
has "$OUT" "RUNNING *1"
ok "schedules get: LAST SKIP overlap while a 2.5 s job runs every second"
expect 0 schedules pause rb-tick
has "$OUT" "STATE *paused"
expect 0 jobs wait "$(val .last_fire.job_id schedules get rb-tick)" --wait-timeout 60s --poll 200ms
expect 0 schedules trigger rb-tick
trig=$(awk 'NR == 2 {print $3}' <<<"$OUT")
[[ $trig == sch-rb-tick-t* ]] || fail "schedules trigger printed no job: $OUT"
expect 0 jobs wait "$trig" --wait-timeout 60s --poll 200ms
ok "schedules pause: exit 0, paused; trigger: exit 0, its job $trig finished"
fired=$(sql "SELECT COUNT(*) FROM \`$DB\`.schedule_fires WHERE schedule_id = 'rb-tick' AND state IN ('running', 'ended')")
made=$(sql "SELECT COUNT(*) FROM \`$DB\`.orchestrator_jobs WHERE job_id LIKE 'sch-rb-tick-%'")
skips=$(sql "SELECT COUNT(*) FROM \`$DB\`.orchestrator_audit WHERE event_type = 'schedule.skipped'")
[ "$fired" = "$made" ] && [ "$fired" -ge 2 ] || fail "$fired fires made $made jobs"
[ "$skips" -ge 1 ] || fail "the skips are not audited"
expect 0 schedules delete rb-tick
ok "one job per fire ($fired), $skips skips audited; schedules delete: exit 0"

# ---- 2. Drain the cluster for maintenance ------------------------------------------------
step "2. drain the cluster for maintenance"
oc -o json pools list >"$WORK/pools-before.json"
for i in 1 2 3 4; do expect 0 jobs submit --type sleep --agent ops --payload '{"ms": 4000}' --job-id "drain-$i" -q; done
until_ok 60 "the drain jobs in flight" eval '[ "$(in_flight sleep)" = 4 ]'
expect 0 control drain --wait --wait-timeout 90s --poll 200ms
q 'all(.pools[]; .status == "stopped" or (.status == "evicted" and .spawned_workers == 0))' pools list ||
  fail "not every pool is stopped: $(oc pools list)"
ok "control drain --wait: exit 0, every pool stopped (or evicted and empty)"
[ "$(jobs_count --status running)" = 0 ] && [ "$(jobs_count --status claimed)" = 0 ] || fail "jobs still run after the drain"
q '[.leases[] | select(.job_id != null)] | length == 0' leases list --status active || fail "a job lease is still active"
[ "$(active_cpu_leases "$API")" = 0 ] || fail "a cpu lease is still active: $(active_cpu_leases "$API")"
for i in 1 2 3 4; do q '.status == "done"' jobs get "drain-$i" || fail "drain-$i did not finish before its worker left"; done
ok "the jobs in flight finished; nothing runs, no job holds a lease"

# ---- 5. Redis data loss (while drained: the jobs queued have no worker) -------------------
step "5. Redis data loss"
for i in 1 2 3 4 5; do expect 0 jobs submit --type noop --agent ops --job-id "redis-$i" -q; done
q '.cluster.queues[] | select(.type == "noop") | .length >= 5' status || fail "the queued jobs are not on their stream"
LEADER_URL=http://${ORCH_ADDR[$(leader_name)]}
before=$(recoveries "$LEADER_URL")
kill -KILL "$REDIS_PID"
# The killed process closes its listening socket as it goes, not at once: a new Redis bound
# before that fails with "Address already in use".
until_ok 10 "the killed Redis lets go of port $REDIS_PORT" eval '! (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT")'
start_redis # empty, with a new run id
until_ok 30 "readyz ok again" oc status
until_ok 30 "the leader's recovery" eval '[ "$(recoveries "$LEADER_URL")" -gt "$before" ]'
ok "readyz ok; gpu_orchestrator_redis_recoveries_total $before -> $(recoveries "$LEADER_URL")"
jq -r '.pools[] | select(.status != "evicted") | "\(.pool_id) \(.desired_workers)"' "$WORK/pools-before.json" |
  while read -r pool n; do oc pools scale "$pool" "$n" --restart >/dev/null || exit 1; done || fail "restarting the pools"
until_ok 60 "pool tools running again" pool_is tools running
ok "the pools are back with their saved sizes (drain step 5)"
expect 0 jobs wait redis-1 redis-2 redis-3 redis-4 redis-5 --wait-timeout 60s --poll 200ms
ok "every job queued before the loss finished"

# ---- 3. Recover from a dead leader -------------------------------------------------------
step "3. recover from a dead leader"
dead=$(leader_name)
[ -n "$dead" ] || fail "no leader before the kill"
survivor=a
[ "$dead" = a ] && survivor=b
term=$(val .cluster.leader.term status)
killed_at=$SECONDS
kill -KILL -- "-${ORCH_PID[$dead]}" # the leader's host dies: the process and its local workers
API=http://${ORCH_ADDR[$survivor]}
until_ok 30 "$survivor leads in a later term" q ".cluster.this_instance_leads and .cluster.leader.term > $term" status
ok "$survivor leads in term $(val .cluster.leader.term status) (was $term), $((SECONDS - killed_at))s after the kill"
expect 0 jobs submit --type noop --agent ops --wait --wait-timeout 60s --poll 200ms
ok "a job submitted after the failover finishes (the new leader replaced the dead host's workers)"
start_orch "$dead"
q ".cluster.this_instance_leads and .cluster.leader.term == $((term + 1))" status ||
  fail "the restarted $dead took over: $(oc status)" # asked of the survivor: it still leads, same term
ok "$dead restarted as a follower; the term stays"

# ---- 6. MariaDB failover -----------------------------------------------------------------
step "6. MariaDB failover"
term=$(val .cluster.leader.term status)
ids=$(sql "SELECT id FROM information_schema.processlist WHERE db = '$DB'")
for id in $ids; do sql "KILL CONNECTION $id" >/dev/null 2>&1 || true; done
ok "killed the $(wc -w <<<"$ids") connections of the cluster's database, the leader's lock with them"
until_ok 30 "ready with a leader in a later term" q ".readyz.status == \"ok\" and .cluster.leader.term > $term" status
ok "readyz ok, a leader in term $(val .cluster.leader.term status) (was $term)"
expect 0 jobs submit --type noop --agent ops --wait --wait-timeout 60s --poll 200ms
ok "jobs still finish"
skip "6. promoting a replica and losing unreplicated transactions: this machine has one MariaDB server and no replica"

# ---- 8. Rotate API tokens ----------------------------------------------------------------
step "8. rotate API tokens"
OLD_ADMIN=$ADMIN
out=$(mktoken --role admin)
NEW_ADMIN=$(token_of "$out") NEW_ADMIN_LINE=$(line_of "$out")
out=$(mktoken --role worker)
NEW_WORKER=$(token_of "$out") NEW_WORKER_LINE=$(line_of "$out")
printf '%s\n%s\n' "$NEW_ADMIN_LINE" "$NEW_WORKER_LINE" >>"$TOKENS"
WORKER_TOKEN=$NEW_WORKER
for name in a b; do stop_orch "$name" && start_orch "$name"; done
ok "new lines appended; rolling restart done"
ADMIN=$NEW_ADMIN
expect 0 jobs list --limit 1
ok "the new admin token works"
expect 0 pools drain tools --wait --wait-timeout 60s --poll 200ms
expect 0 pools scale tools 1 --restart
until_ok 60 "pool tools running on the new worker token" pool_is tools running
ok "the pool's workers restarted onto the new worker token"
printf '%s\n%s\n' "$NEW_ADMIN_LINE" "$NEW_WORKER_LINE" >"$TOKENS"
for name in a b; do
  kill -HUP "${ORCH_PID[$name]}"
  until_ok 10 "orchestrator $name reloaded its tokens" grep -q "tokens reloaded" "$LOGS/$name.log"
done
ok "old lines removed; both orchestrators reloaded (SIGHUP), no restart"
ADMIN=$OLD_ADMIN
expect 2 jobs list
has "$ERR" "401 unauthorized"
has "$ERR" "hint: the server does not accept the token"
ADMIN=$NEW_ADMIN
ok "the old admin token is refused (exit 2, with the hint)"
expect 0 jobs submit --type noop --agent ops --wait --wait-timeout 60s --poll 200ms
ok "work goes on with the new tokens"

# ---- summary -----------------------------------------------------------------------------
printf '\nrunbook-check passed in %ds.\n' $((SECONDS - START))
for s in "${SKIPPED[@]}"; do printf 'SKIPPED: %s\n' "$s"; done
