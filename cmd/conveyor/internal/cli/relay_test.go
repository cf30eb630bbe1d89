package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The relay's own run (a database, Redis, SIGKILL) is cmd/conveyor's TestRelayE2E and package
// outbox's tests; here, its refusals of bad flags, before it connects to anything.
func TestRelayRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		msgs []string
	}{
		{"NoPostgres", nil, nil, []string{"--postgres", envPostgres, "required"}},
		{"Batch", nil, []string{"--postgres", "postgres://db/x", "--batch", "0"}, []string{"--batch", "at least 1"}},
		{"Poll", map[string]string{envPostgres: "postgres://db/x"}, []string{"--poll", "0s"}, []string{"--poll", "positive"}},
		{"BadURL", nil, []string{"--postgres", "postgres://db:notaport/x"}, []string{"postgres URL"}},
		{"Argument", nil, []string{"extra"}, []string{"unexpected argument"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := execute(t, tc.env, append([]string{"relay", "--redis", noRedis}, tc.args...)...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			for _, m := range tc.msgs {
				require.Contains(t, stderr, m)
			}
		})
	}
}
