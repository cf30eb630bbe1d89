package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
)

// TestStatusLogsSealedE2E: 'conveyor status --logs' opens lines a worker with keys sealed when
// given --keys, and shows the placeholder with "encrypted" without.
func TestStatusLogsSealedE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	srv := redistest.Start(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	s := make([]byte, keyring.KeySize)
	_, _ = rand.Read(s)
	k, err := keyring.New([]string{"k1"}, [][]byte{s})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(file, []byte("k1 "+base64.StdEncoding.EncodeToString(s)+"\n"), 0o600))

	w, err := pipeline.NewWorker(c.rdb, pipeline.WorkerConfig{Queues: []string{"cards"}, Keys: k})
	require.NoError(t, err)
	w.Handle("charge", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("charging %s", j.Payload)
		return nil, nil
	})
	pipelinetest.StartWorker(t, w)
	client, err := pipeline.NewClient(c.rdb, pipeline.ClientConfig{Keys: k})
	require.NoError(t, err)
	j := pipelinetest.Work(t.Context(), t, client, "cards", pipeline.Task{Type: "charge", Payload: []byte("4111-1111")})

	type view struct {
		Logs []struct {
			Lines     []string `json:"lines"`
			Encrypted *struct {
				Key   string `json:"key"`
				Bytes int    `json:"bytes"`
			} `json:"encrypted"`
		} `json:"logs"`
	}
	var opened, sealed view
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "--keys", file, "status", "--logs", "--json", j.ID)), &opened))
	require.Len(t, opened.Logs, 1)
	require.Nil(t, opened.Logs[0].Encrypted)
	require.Contains(t, opened.Logs[0].Lines[0], "charging 4111-1111")
	require.Contains(t, c.ok(t, "--keys", file, "status", "--logs", j.ID), "charging 4111-1111")

	out := c.ok(t, "status", "--logs", "--json", j.ID)
	require.NotContains(t, out, "4111")
	require.NoError(t, json.Unmarshal([]byte(out), &sealed))
	require.Len(t, sealed.Logs, 1)
	require.Regexp(t, `^<encrypted, \d+ bytes, key k1>$`, sealed.Logs[0].Lines[0])
	require.NotNil(t, sealed.Logs[0].Encrypted)
	require.Equal(t, "k1", sealed.Logs[0].Encrypted.Key)
	require.Contains(t, c.ok(t, "status", "--logs", j.ID), "<encrypted, ")
}
