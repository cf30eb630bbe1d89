package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestKeysRotateE2E runs 'conveyor keys rotate' through the binary against a Redis of its own:
// jobs sealed under k1 are under k2 after it, a second run finds them current, and without
// keys it is a usage error.
func TestKeysRotateE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	srv := redistest.Start(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	secret := func() []byte { s := make([]byte, keyring.KeySize); _, _ = rand.Read(s); return s }
	s1, s2 := secret(), secret()
	k1, err := keyring.New([]string{"k1"}, [][]byte{s1})
	require.NoError(t, err)
	k2, err := keyring.New([]string{"k2"}, [][]byte{s2})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(file, []byte("k2 "+base64.StdEncoding.EncodeToString(s2)+"\nk1 "+
		base64.StdEncoding.EncodeToString(s1)+"\n"), 0o600))

	client, err := pipeline.NewClient(c.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	_, err = client.Enqueue(ctx, "emails", pipeline.Task{Type: "echo", Payload: k1.Seal(keyring.Payload, "a", []byte("queued"))}, pipeline.WithID("a"))
	require.NoError(t, err)
	_, err = client.Enqueue(ctx, "emails", pipeline.Task{Type: "echo", Payload: k1.Seal(keyring.Payload, "b", []byte("later"))},
		pipeline.WithID("b"), pipeline.WithDelay(time.Hour))
	require.NoError(t, err)

	var rep struct {
		Key   string `json:"key"`
		Total struct {
			Resealed int `json:"resealed"`
			Current  int `json:"current"`
		} `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "keys", "rotate", "--keys", file, "--json")), &rep))
	require.Equal(t, "k2", rep.Key)
	require.Equal(t, 2, rep.Total.Resealed)
	for _, id := range []string{"a", "b"} {
		j, err := client.Get(ctx, "emails", id)
		require.NoError(t, err)
		kid, _ := keyring.KeyID(j.Payload)
		require.Equal(t, "k2", kid)
		_, err = k2.Open(keyring.Payload, id, j.Payload)
		require.NoError(t, err)
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "keys", "rotate", "--keys", file, "--json")), &rep))
	require.Equal(t, 0, rep.Total.Resealed)
	require.Equal(t, 2, rep.Total.Current)
	c.refused(t, 2, "no keys", "keys", "rotate")
}
