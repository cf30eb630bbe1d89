package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// conveyor version and --version through the binary, run from TestE2E.

func testVersion(t *testing.T, c *cli) {
	out := c.ok(t, "version")
	require.Regexp(t, `^conveyor \S+ \(commit .*; go\S+ \w+/\w+\)\n$`, out)

	// A 'go build' in a git checkout records the commit (this environment may set
	// GOFLAGS=-buildvcs=false: ask for it).
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not in a git checkout")
	}
	// go build stamps no commit in a linked worktree or a submodule, where .git is a file.
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a linked git worktree: go build records no commit there")
	}
	bin := filepath.Join(t.TempDir(), "conveyor")
	b, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
	vc := &cli{bin: bin, url: c.url}
	// The fields of 'version --json' the test reads, by their JSON names.
	var v struct {
		Version    string `json:"version"`
		Module     string `json:"module"`
		Commit     string `json:"commit"`
		CommitTime string `json:"commit_time"`
		Modified   bool   `json:"modified"`
		Go         string `json:"go"`
	}
	require.NoError(t, json.Unmarshal([]byte(vc.ok(t, "version", "--json")), &v))
	require.Equal(t, "github.com/conveyorq/conveyor/cmd/conveyor", v.Module, "the binary is a module of its own")
	require.Regexp(t, `^[0-9a-f]{40}$`, v.Commit)
	if v.Version != "(devel)" { // Go 1.24 and later: a pseudo-version of the commit
		require.Regexp(t, `^v\d+\.\d+\.\d+-(0\.)?\d{14}-`+v.Commit[:12]+`(\+dirty)?$`, v.Version)
		require.Equal(t, v.Modified, strings.HasSuffix(v.Version, "+dirty"))
	}
	require.NoError(t, exec.Command("git", "cat-file", "-e", v.Commit+"^{commit}").Run(), "a commit of this repository")
	require.NotEmpty(t, v.CommitTime)
	require.Regexp(t, `^go1\.`, v.Go)
	line := vc.ok(t, "version")
	require.Regexp(t, `^conveyor `+regexp.QuoteMeta(v.Version)+` \(commit `+v.Commit+`, `+regexp.QuoteMeta(v.CommitTime)+`(, modified)?; go`, line)
	require.Equal(t, line, vc.ok(t, "--version"))
	require.Equal(t, line, vc.ok(t, "-v"))
}
