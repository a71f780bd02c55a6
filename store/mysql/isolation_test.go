package mysql

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChooseIsolation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		logBin  bool
		format  string
		set     bool
		whyPart string
	}{
		{name: "NoBinaryLog", format: "STATEMENT", set: true},
		{name: "Mixed", logBin: true, format: "MIXED", set: true},
		{name: "Row", logBin: true, format: "ROW", set: true},
		{name: "Statement", logBin: true, format: "STATEMENT", whyPart: "binlog_format=STATEMENT"},
		{name: "DSNTxIsolation", params: map[string]string{"tx_isolation": "'REPEATABLE-READ'"}, set: false, whyPart: "set by the DSN (tx_isolation)"},
		{name: "DSNTransactionIsolation", params: map[string]string{"transaction_isolation": "'SERIALIZABLE'"}, whyPart: "transaction_isolation"},
		{name: "OtherParams", params: map[string]string{"time_zone": "'+00:00'"}, logBin: true, format: "ROW", set: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chooseIsolation(tc.params, tc.logBin, tc.format)
			require.Equal(t, tc.set, got.set)
			if tc.set {
				require.Empty(t, got.why)
			} else {
				require.Contains(t, got.why, tc.whyPart)
			}
		})
	}
}
