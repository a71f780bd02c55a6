#!/usr/bin/env python3
"""Checks the orchestrator against a real NVIDIA GPU (run by scripts/gpu-check.sh).

It starts `orchestrator dev` (the embedded mode: SQLite, in-process Redis, an in-process worker)
with NVML telemetry and a GPU job type whose command holds GPU memory through PyTorch, then
checks, and prints as a pass/fail table:

  telemetry      GET /gpus shows the GPUs NVML reports (source nvml, total memory, fresh)
  one_job        a GPU job runs with CUDA_VISIBLE_DEVICES naming the GPU of its lease
  four_jobs      four jobs of 30 GB on one 80 GB GPU: never more than two at a time, all done,
                 and the third starting within 1 s of the first release (the scheduler's goal)
  no_capacity    with an outside process holding 75 GiB, a lease that no longer
                 fits is refused 409 no_capacity
  pressure_gate  with that process holding memory above the high watermark, a GPU submit is
                 refused 429 gpu_pressure

--sim runs the same checks on a simulated GPU (ORCH_SIM_GPUS, no NVML, no PyTorch) so that the
script itself can be tried on any machine; the outside process is then a lease of the same size.
Only the Python standard library is needed besides PyTorch on the GPU host.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime

HOLD = r'''
import json, os, sys, time
req = json.load(sys.stdin)
out = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid()}
if req.get("sim"):
    time.sleep(req["seconds"])
else:
    import torch
    out["device_count"] = torch.cuda.device_count()
    out["device_name"] = torch.cuda.get_device_name(0)
    buf = torch.empty(int(req["gib"] * (1 << 30)), dtype=torch.uint8, device="cuda")
    buf.fill_(1)
    torch.cuda.synchronize()
    out["held_gib"] = req["gib"]
    time.sleep(req["seconds"])
print(json.dumps(out))
'''

HOLDER = r'''
import sys, time, torch
buf = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda")
buf.fill_(1)
torch.cuda.synchronize()
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
'''


class API:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, {"raw": raw.decode(errors="replace")}
        except urllib.error.URLError as e:
            if path == "/readyz":  # not listening yet
                return 0, {"raw": str(e)}
            raise


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def wait_for(what, fn, timeout, step=0.25):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(step)


def wait_jobs(api, ids, timeout):
    def ended():
        jobs = [api.call("GET", "/jobs/" + i)[1] for i in ids]
        if all(j.get("status") in ("done", "dead_letter", "cancelled") for j in jobs):
            return jobs
        return None
    return wait_for("jobs to end", ended, timeout, step=0.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="bin", help="directory of the orchestrator binary")
    ap.add_argument("--sim", action="store_true", help="a simulated 81,559 MB GPU, no NVML or PyTorch")
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="gpu-check-")
    hold = os.path.join(tmp, "hold.py")
    with open(hold, "w") as f:
        f.write(HOLD)
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write(f"""http_addr: 127.0.0.1:{args.port}
data_dir: {tmp}/data
embedded_redis_addr: 127.0.0.1:{args.port + 1}
job_types:
  gpu30:
    handler: exec
    command: hold
    gpu_memory_mb: 30000
    max_attempts: 1
  gpu1:
    handler: exec
    command: hold
    gpu_memory_mb: 1000
    max_attempts: 1
worker:
  concurrency: 4
  commands:
    hold:
      argv: [{sys.executable}, {hold}]
""")
    env = dict(os.environ, ORCH_CONFIG=cfg, ORCH_LOG_FORMAT="text")
    env.pop("ORCH_TOKENS_FILE", None)
    env.pop("ORCH_API_TOKENS", None)
    if args.sim:
        env.update(ORCH_SIM_GPUS="1x81559", ORCH_NVML_DISABLE="1")
    else:
        env.pop("ORCH_SIM_GPUS", None)
        env["ORCH_SIM_GPUS"] = ""
    log = open(os.path.join(tmp, "orchestrator.log"), "w")
    orch = subprocess.Popen([os.path.join(args.bin, "orchestrator"), "dev"], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    api = API(f"http://127.0.0.1:{args.port}")
    results = []

    def record(name, ok, detail):
        results.append((name, "pass" if ok else "FAIL", detail))
        print(f"[{name}] {'pass' if ok else 'FAIL'}: {detail}", flush=True)

    holder = None
    try:
        wait_for("orchestrator ready", lambda: api.call("GET", "/readyz")[0] == 200 if orch.poll() is None
                 else sys.exit(f"orchestrator exited: see {tmp}/orchestrator.log"), 120)

        # 1. telemetry
        gpus = wait_for("fresh GPU telemetry", lambda: [g for g in api.call("GET", "/gpus")[1].get("gpus", [])
                                                        if g.get("fresh")], 60)
        g0 = gpus[0]
        want = "sim" if args.sim else "nvml"
        record("telemetry", g0["source"].startswith(want[:3]) and g0["memory_total_mb"] > 70000,
               f"{len(gpus)} GPU(s); gpu 0: {g0['name']!r} source={g0['source']} total={g0['memory_total_mb']} MB "
               f"used={g0['memory_used_mb']} MB free={g0['memory_free_mb']} MB")

        payload = {"sim": args.sim}
        # 2. one job and its CUDA_VISIBLE_DEVICES
        st, sub = api.call("POST", "/jobs/submit", {"type": "gpu1", "agent": "gpucheck",
                                                     "payload": dict(payload, gib=1, seconds=1)})
        [job] = wait_jobs(api, [sub["job_id"]], 120)
        res = job.get("result") or {}
        ok = job["status"] == "done" and res.get("cuda_visible_devices") == "0" and \
            (args.sim or res.get("device_count") == 1)
        record("one_job", ok, f"status={job['status']} CUDA_VISIBLE_DEVICES={res.get('cuda_visible_devices')!r} "
               f"torch devices={res.get('device_count')} {res.get('device_name', '')} {job.get('last_error', '')}")

        # 3. four 30 GB jobs holding 25 GiB each for 6 s on one 80 GB GPU
        ids = []
        for i in range(4):
            st, sub = api.call("POST", "/jobs/submit", {"type": "gpu30", "agent": "gpucheck",
                                                         "payload": dict(payload, gib=25, seconds=6)})
            ids.append(sub["job_id"])
        jobs = wait_jobs(api, ids, 400)
        spans = sorted((ts(j["started_at"]), ts(j["finished_at"])) for j in jobs if j.get("started_at"))
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
        conc = peak = 0
        for _, d in events:
            conc += d
            peak = max(peak, conc)
        done = sum(j["status"] == "done" for j in jobs)
        gap = None
        if len(spans) == 4:
            gap = spans[2][0] - min(e for _, e in spans[:2])
        record("four_jobs", done == 4 and peak == 2 and gap is not None and gap <= 1.0,
               f"done={done}/4, at most {peak} at once, third start {gap:.1f} s after the first release"
               if gap is not None else f"done={done}/4 statuses={[j['status'] for j in jobs]}")

        # 4 and 5: an outside process holds 70 GiB (sim: a lease of that size)
        hold_mb = 75 * 1024
        # Telemetry lags a poll behind the releases: start from a GPU that reads as idle.
        wait_for("the GPU to read idle", lambda: all(g["memory_used_mb"] < 4096 and g["memory_reserved_mb"] == 0
                                                     for g in api.call("GET", "/gpus")[1]["gpus"]), 60)
        if args.sim:
            st, lease = api.call("POST", "/leases", {"agent": "outside", "min_memory_mb": hold_mb, "ttl_seconds": 300})
            holder_desc = f"lease of {hold_mb} MB ({st} {lease.get('error', {}).get('message', '')})"
        else:
            holder = subprocess.Popen([sys.executable, "-c", HOLDER, "75", "300"], stdout=subprocess.PIPE, text=True)
            holder.stdout.readline()
            holder_desc = f"process {holder.pid} holding 75 GiB"
        st, body = wait_for("the lease refusal", lambda: (lambda r: r if r[0] != 201 else None)(
            api.call("POST", "/leases", {"agent": "gpucheck", "min_memory_mb": 30000, "ttl_seconds": 5})), 30, 1)
        record("no_capacity", st == 409 and body["error"]["code"] == "no_capacity",
               f"{holder_desc}: POST /leases 30000 MB -> {st} {body['error']['code']}")
        st, body = wait_for("the pressure gate", lambda: (lambda r: r if r[0] == 429 else None)(
            api.call("POST", "/jobs/submit", {"type": "gpu1", "agent": "gpucheck", "payload": dict(payload, gib=1, seconds=0)})),
            30, 1)
        record("pressure_gate", st == 429 and body["error"]["code"] == "gpu_pressure",
               f"{holder_desc}: GPU submit -> {st} {body['error']['code']}")
    except Exception as e:  # a check that could not run is a failure
        record("error", False, f"{type(e).__name__}: {e} (log: {tmp}/orchestrator.log)")
    finally:
        if holder:
            holder.kill()
        os.killpg(orch.pid, signal.SIGINT)
        try:
            orch.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(orch.pid, signal.SIGKILL)
        log.close()

    print()
    print("| check | result | detail |")
    print("|---|---|---|")
    for name, r, detail in results:
        print(f"| {name} | {r} | {detail} |")
    failed = [n for n, r, _ in results if r != "pass"]
    if not args.keep and not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"\nlogs and data kept in {tmp}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
