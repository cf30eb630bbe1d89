package keyspace_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

func TestValidateNames(t *testing.T) {
	t.Parallel()
	require.NoError(t, keyspace.ValidateQueue("emails.v2"))
	require.Error(t, keyspace.ValidateQueue("a{b}"))
	require.NoError(t, keyspace.ValidateID("order:42"))
	require.Error(t, keyspace.ValidateID(""))
	require.NoError(t, keyspace.ValidateSchedule("nightly"))
	require.Error(t, keyspace.ValidateSchedule(string(make([]byte, keyspace.MaxScheduleLen+1))))
}

// TestKeysOfDefaultPrefix: an empty prefix is the one a Client, Worker or Inspector takes
// without one.
func TestKeysOfDefaultPrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, keyspace.KeysOf(pipeline.DefaultPrefix, "q", 3), keyspace.KeysOf("", "q", 3))
	require.Len(t, keyspace.KeysOf("", "q", 0), 1)
}
