package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatusCluster(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.submit(t, "status-cluster", "ops")
	r := b.run(t, "status")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Contains(t, r.stdout, "THIS INSTANCE LEADS")
	require.Regexp(t, `(?m)^noop\s+noop\s+1\s+0\s*$`, r.stdout, "the queue of the submitted job")

	r = b.run(t, "status", "-o", "json")
	require.Equal(t, exitOK, r.code, "%s", r)
	doc := decodeJSON[statusDoc](t, r)
	require.NotNil(t, doc.Cluster)
	require.NotEmpty(t, doc.Cluster.Queues)
}
