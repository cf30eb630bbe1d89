package cli

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestKeysRotate runs 'conveyor keys rotate': the report as JSON and as a table, a second run
// finding everything current, exit 1 for a value under a key the keyring lacks, exit 2 for
// usage errors, and the keys from the environment.
func TestKeysRotate(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.UniqueName(t)
	base := []string{"--redis", srv.URL(), "--prefix", prefix}
	run := func(env map[string]string, args ...string) (string, string, int) {
		return runWithEnv(t, env, "", append(append([]string{}, base...), args...)...)
	}
	line := func(id string) (string, []byte) {
		s := make([]byte, keyring.KeySize)
		_, _ = rand.Read(s)
		return id + " " + base64.StdEncoding.EncodeToString(s), s
	}
	l0, s0 := line("k0")
	l1, s1 := line("k1")
	l2, _ := line("k2")
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(file, []byte("# newest first\n"+l2+"\n"+l1+"\n"), 0o600))
	k0, err := keyring.New([]string{"k0"}, [][]byte{s0})
	require.NoError(t, err)
	k1, err := keyring.New([]string{"k1"}, [][]byte{s1})
	require.NoError(t, err)

	c, err := pipeline.NewClient(srv.Client(t), pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		_, err := c.Enqueue(t.Context(), "emails", pipeline.Task{Type: "t", Payload: k1.Seal(keyring.Payload, id, []byte("hi "+id))}, pipeline.WithID(id))
		require.NoError(t, err)
	}
	_, err = c.Enqueue(t.Context(), "emails", pipeline.Task{Type: "t", Payload: []byte("plain")}, pipeline.WithID("c"))
	require.NoError(t, err)

	stdout, stderr, code := run(nil, "keys", "rotate", "--keys", file, "--json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Key    string   `json:"key"`
		Queues []string `json:"queues"`
		Places map[string]struct {
			Resealed int `json:"resealed"`
			Sealed   int `json:"sealed"`
		} `json:"places"`
		Total struct {
			Resealed, Sealed, Current int
		} `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, "k2", rep.Key)
	assert.Equal(t, []string{"emails"}, rep.Queues)
	assert.Equal(t, 2, rep.Places["queued"].Resealed)
	assert.Equal(t, 1, rep.Places["queued"].Sealed)

	// Again, from the environment and as a table: all current.
	stdout, stderr, code = run(map[string]string{keyring.EnvVar: l2 + ";" + l1}, "keys", "rotate", "--queue", "emails")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "PLACE")
	assert.Contains(t, stdout, "0 values now under key k2 in 1 queue")

	// A value under a key the keyring lacks.
	_, err = c.Enqueue(t.Context(), "emails", pipeline.Task{Type: "t", Payload: k0.Seal(keyring.Payload, "d", []byte("lost"))}, pipeline.WithID("d"))
	require.NoError(t, err)
	_, stderr, code = run(nil, "keys", "rotate", "--keys", file)
	require.Equal(t, 1, code)
	assert.Contains(t, stderr, "1 values could not be opened (sealed under keys the keyring lacks: k0)")
	require.NoError(t, os.WriteFile(file, []byte(l2+"\n"+l1+"\n"+l0+"\n"), 0o600))
	_, stderr, code = run(nil, "keys", "rotate", "--keys", file)
	require.Equal(t, 0, code, stderr)

	for _, tc := range []struct {
		args    []string
		env     map[string]string
		want    int
		message string
	}{
		{[]string{"keys", "rotate"}, nil, 2, "no keys: give --keys FILE"},
		{[]string{"keys", "rotate", "--keys", filepath.Join(dir, "none")}, nil, 2, "--keys: keyring:"},
		{[]string{"keys", "rotate"}, map[string]string{keyring.EnvVar: "k1 short"}, 2, "$" + keyring.EnvVar},
		{[]string{"keys", "rotate", "--keys", file, "--batch", "0"}, nil, 2, "--batch 0 is outside 1..1000"},
		{[]string{"keys", "rotate", "--keys", file, "--queue", "bad queue"}, nil, 2, ""},
		{[]string{"keys", "rotate", "--keys", file, "extra"}, nil, 2, "unexpected argument"},
		{[]string{"keys", "rotate", "--keys", file, "--queue", "nope"}, nil, 1, `queue "nope" not found`},
	} {
		_, stderr, code := run(tc.env, tc.args...)
		assert.Equal(t, tc.want, code, "%v: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.message, "%v", tc.args)
	}
}
