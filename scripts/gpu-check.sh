#!/usr/bin/env bash
# Checks the orchestrator on a host with a real NVIDIA GPU: NVML telemetry, a job's
# CUDA_VISIBLE_DEVICES, four 30 GB jobs on one 80 GB GPU, a placement refusal and the pressure
# gate (scripts/gpu-check.py says what each check asserts). Prints a pass/fail table; exits 1 when
# a check fails. Needs python3 with PyTorch on the GPU host; `--sim` tries the script on any
# machine with a simulated GPU. Builds bin/ when Go is here, else uses a bin/ built elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v go >/dev/null 2>&1; then
  make build >/dev/null
fi
[ -x bin/orchestrator ] || { echo "bin/orchestrator missing: run make build" >&2; exit 2; }
exec python3 scripts/gpu-check.py "$@"
