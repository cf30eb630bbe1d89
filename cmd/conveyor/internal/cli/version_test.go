package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	v := readVersion()
	require.NotEmpty(t, v.Version)
	require.Regexp(t, `^go1\.`, v.Go)
	require.Contains(t, v.Platform, "/")
	require.Regexp(t, `^conveyor \S+ \(commit .+; go1\.\S+ \w+/\w+\)$`, v.String())

	require.Equal(t, "conveyor v1.2.0 (commit 0123abc, 2026-11-26T08:48:55Z, modified; go1.26.0 linux/amd64)",
		versionInfo{Version: "v1.2.0", Commit: "0123abc", CommitTime: "2026-11-26T08:48:55Z", Modified: true,
			Go: "go1.26.0", Platform: "linux/amd64"}.String())
	require.Equal(t, "conveyor (devel) (commit unknown; go1.26.0 linux/amd64)",
		versionInfo{Version: "(devel)", Go: "go1.26.0", Platform: "linux/amd64"}.String())

	stdout, stderr, code := runInProcess(t, "", "version")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, v.String()+"\n", stdout)
	stdout, stderr, code = runInProcess(t, "", "version", "--json")
	require.Equal(t, 0, code, stderr)
	var got versionInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, v, got)

}
