package outbox_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

func newKeyring(t *testing.T, ids []string, secrets ...[]byte) *keyring.Keyring {
	t.Helper()
	k, err := keyring.New(ids, secrets)
	require.NoError(t, err)
	return k
}

// TestRotate: the rows' payloads sealed under k1, or plain, are under k2 after Rotate with
// "k2, k1" and open with k2 alone; a row sealed under a key the keyring lacks is counted
// failed with its key's id; a row another transaction holds is skipped and re-sealed by the
// next run; a run with everything current writes no row.
func TestRotate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	secret := func() []byte { s := make([]byte, keyring.KeySize); _, _ = rand.Read(s); return s }
	s0, s1, s2 := secret(), secret(), secret()
	k0 := newKeyring(t, []string{"k0"}, s0)
	k1 := newKeyring(t, []string{"k1"}, s1)
	k21 := newKeyring(t, []string{"k2", "k1"}, s2, s1)
	k2 := newKeyring(t, []string{"k2"}, s2)

	plain := map[string]string{}
	add := func(id, p string, k *keyring.Keyring) {
		_, err := outbox.Enqueue(ctx, b.db, b.queue, pipeline.Task{Type: "t", Payload: k.Seal(keyring.Payload, id, []byte(p))}, outbox.WithID(id))
		require.NoError(t, err)
		plain[id] = p
	}
	for i := range 5 {
		add(fmt.Sprintf("sealed-%d", i), fmt.Sprintf("payload %d", i), k1)
	}
	add("plain", "stored before encryption", nil)
	add("lost", "under a key no one lists", k0)

	// A transaction holds one row, as the relay does while it sends it.
	held, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = held.ExecContext(ctx, `SELECT 1 FROM `+outbox.Table+` WHERE id = 'sealed-3' FOR UPDATE`)
	require.NoError(t, err)

	rep, err := outbox.Rotate(ctx, b.db, k21, 2)
	require.NoError(t, err)
	require.Equal(t, outbox.RotateReport{Resealed: 4, Sealed: 1, Failed: 1, MissingKeys: []string{"k0"}}, rep)
	require.NoError(t, held.Rollback())

	rep, err = outbox.Rotate(ctx, b.db, k21, 0)
	require.NoError(t, err)
	require.Equal(t, outbox.RotateReport{Resealed: 1, Current: 5, Failed: 1, MissingKeys: []string{"k0"}}, rep)

	xmins := func() map[string]string {
		rows, err := b.db.QueryContext(ctx, `SELECT id, payload, xmin::text FROM `+outbox.Table)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var id, xmin string
			var payload []byte
			require.NoError(t, rows.Scan(&id, &payload, &xmin))
			out[id] = xmin
			if id == "lost" {
				continue
			}
			kid, ok := keyring.KeyID(payload)
			require.True(t, ok, id)
			require.Equal(t, "k2", kid, id)
			got, err := k2.Open(keyring.Payload, id, payload)
			require.NoError(t, err)
			require.Equal(t, plain[id], string(got))
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := xmins()
	rep, err = outbox.Rotate(ctx, b.db, k21, 0)
	require.NoError(t, err)
	require.Equal(t, 6, rep.Current)
	require.Equal(t, 0, rep.Resealed+rep.Sealed)
	require.Equal(t, before, xmins(), "a run with everything current updates no row")

	_, err = outbox.Rotate(ctx, b.db, nil, 0)
	require.Error(t, err)
}
