// Package e2e holds the end-to-end tests: they build the real binaries, start orchestrator and
// worker processes against the real MariaDB and Redis, kill them with SIGKILL, restart them,
// and check that no job is lost or run twice. Skipped with -short.
package e2e
