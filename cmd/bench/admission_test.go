package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuorch/orchestrator/client"
)

func TestSliceSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d      time.Duration
		modes  int
		rounds int
		slice  time.Duration
	}{
		{10 * time.Second, 3, 3, 10 * time.Second / 9},
		{3 * time.Second, 3, 1, time.Second},
		{2 * time.Second, 3, 1, 2 * time.Second / 3},
		{10 * time.Second, 1, 10, time.Second},
		{time.Minute, 3, 20, time.Second},
	} {
		rounds, slice := sliceSchedule(tc.d, tc.modes)
		require.Equal(t, tc.rounds, rounds, "%s / %d modes", tc.d, tc.modes)
		require.Equal(t, tc.slice, slice, "%s / %d modes", tc.d, tc.modes)
	}
}

func TestOverExempt(t *testing.T) {
	t.Parallel()
	exempt := AdmissionMode{Name: "exempt", SubmitHTTPMS: &Percentiles{Count: 10, P50: 4.25}, ServerMS: &ServerLatency{Mean: 3.5}}
	m := AdmissionMode{Name: "per_request", SubmitHTTPMS: &Percentiles{Count: 10, P50: 4.75}, ServerMS: &ServerLatency{Mean: 3.25}}
	httpP50, serverMean := overExempt(m, exempt)
	require.Equal(t, 0.5, *httpP50)
	require.Equal(t, -0.25, *serverMean, "noise can make it negative: it is reported as measured")

	httpP50, serverMean = overExempt(AdmissionMode{}, exempt)
	require.Nil(t, httpP50)
	require.Nil(t, serverMean)
}

func TestDescribePolicy(t *testing.T) {
	t.Parallel()
	def := client.AdmissionPolicy{Agent: "*", RatePerSec: 1e6, Burst: 10000000, Enabled: true}
	st := client.AdmissionStatus{Enabled: true, DefaultPolicy: def, DefaultSource: "config"}
	require.Equal(t, "the default (config): 1e+06/s, burst 10000000", describeConfigured(st, benchAgent))

	st.Policies = []client.AdmissionPolicy{{Agent: "other", Enabled: false}, {Agent: benchAgent, RatePerSec: 0.5, Burst: 1, MaxPending: 3, Enabled: true}}
	require.Equal(t, "the agent's own: 0.5/s, burst 1, max_pending 3", describeConfigured(st, benchAgent))

	st.Enabled = false
	require.Equal(t, "admission control disabled (admission.disabled)", describeConfigured(st, benchAgent))
	require.Equal(t, "x: disabled (no token bucket)", describePolicy(client.AdmissionPolicy{}, "x"))
}

func TestAdmissionLine(t *testing.T) {
	t.Parallel()
	res := &ScenarioResult{
		AdmissionModes: []AdmissionMode{
			{Name: "configured", SubmitPerSec: 1234.4, SubmitHTTPMS: &Percentiles{P50: 4.5, P99: 12}, ServerMS: &ServerLatency{Mean: 4}},
			{Name: "exempt", SubmitPerSec: 1300},
		},
		LimiterCallMS: &Percentiles{P50: 0.1, P99: 0.2},
	}
	require.Equal(t, "configured 1234 submits/s (HTTP ms p50 4.50 p99 12.00, server mean 4.00); exempt 1300 submits/s; "+
		"token-bucket call ms p50 0.100 p99 0.200", admissionLine(res))
}
