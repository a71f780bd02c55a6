// Command orchctl is the operator CLI of GPU Orchestrator, over the HTTP API: jobs (submit, get,
// list, cancel, wait, watch), leases, pools, the dead-letter queue, admission policies, control
// (reconcile, drain), GPUs and the cluster status. docs/runbook.md is written in its commands.
//
//	orchctl jobs submit --type noop --agent ops --payload '{"n": 1}' --wait
//	orchctl jobs list --status dead_letter --all -o json
//	orchctl jobs wait JOB_ID... ; echo $?
//	orchctl status
//
// The API is found with --api-url or ORCH_API_URL and authenticated with --token or
// ORCH_API_TOKEN. Exit codes (see `orchctl jobs wait --help`) are stable for scripts.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
