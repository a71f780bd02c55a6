package sqlgen

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValues(t *testing.T) {
	require.Equal(t, []string{"a", "b"}, ASCIIIDs([]string{"a", "é", "b"}))
	require.Equal(t, 50, ClampLimit(0, 50, 100))
	require.Equal(t, 100, ClampLimit(500, 50, 100))
	require.Equal(t, 7, ClampLimit(7, 50, 100))
	require.Equal(t, "?, ?, ?", Placeholders(3))
	require.Empty(t, Placeholders(0))
	require.Equal(t, []any{"x", "y"}, Args([]string{"x", "y"}))
	require.Nil(t, JSONArg(nil))
	require.Equal(t, `{"a":1}`, JSONArg([]byte(`{"a":1}`)))
	require.Nil(t, NilIfEmpty([]byte{}))
	require.Nil(t, NullString(""))
	require.Equal(t, "s", NullString("s"))
	require.Equal(t, "[]", TypesJSON(nil))
	types, err := ParseTypes([]byte(TypesJSON([]string{"a", "b"})))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, types)
	types, err = ParseTypes([]byte("null"))
	require.NoError(t, err)
	require.Equal(t, []string{}, types)
	_, err = ParseTypes([]byte("{"))
	require.Error(t, err)
}
