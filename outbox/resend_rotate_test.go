package outbox_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestResendAcrossRotation: a relay sent a row sealed under k1 and died before deleting it
// (its send done by hand, as TestResendAbsorbed does); then either Rotate re-sealed the row
// under k2, or RotateKeys re-sealed the job in Redis under k2. The next relay, whose Client has
// "k2, k1", sends the row: delivered once, counted a duplicate, not set aside. A relay whose
// Client has no keys cannot tell and sets it aside, as before.
func TestResendAcrossRotation(t *testing.T) {
	t.Parallel()
	secret := func() []byte { s := make([]byte, keyring.KeySize); _, _ = rand.Read(s); return s }
	s1, s2 := secret(), secret()
	k1 := newKeyring(t, []string{"k1"}, s1)
	k21 := newKeyring(t, []string{"k2", "k1"}, s2, s1)
	for _, tc := range []struct {
		name     string
		resealed string // where the rotation re-sealed: "row" or "redis"
		keys     *keyring.Keyring
		want     outbox.RelayStats
	}{
		{"row re-sealed", "row", k21, outbox.RelayStats{Relayed: 1, Duplicates: 1}},
		{"job re-sealed", "redis", k21, outbox.RelayStats{Relayed: 1, Duplicates: 1}},
		{"relay without keys", "row", nil, outbox.RelayStats{Failed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			const plain = `{"card":"4111"}`
			id, err := outbox.Enqueue(ctx, b.db, b.queue, pipeline.Task{Type: "email", Payload: []byte(plain)}, outbox.WithKeys(k1))
			require.NoError(t, err)
			payload := func() []byte {
				var p []byte
				require.NoError(t, b.db.QueryRow(`SELECT payload FROM `+outbox.Table+` WHERE id = $1`, id).Scan(&p))
				return p
			}
			// The dead relay's send: the row's sealed payload, as it is, under the row's id.
			_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "email", Payload: payload()}, pipeline.WithID(id))
			require.NoError(t, err)

			switch tc.resealed {
			case "row":
				rep, err := outbox.Rotate(ctx, b.db, k21, 0)
				require.NoError(t, err)
				require.Equal(t, 1, rep.Resealed)
				kid, _ := keyring.KeyID(payload())
				require.Equal(t, "k2", kid)
			case "redis":
				insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
				require.NoError(t, err)
				rep, err := insp.RotateKeys(ctx, b.queue, k21, pipeline.RotateOptions{})
				require.NoError(t, err)
				require.Equal(t, 1, rep.Total.Resealed)
			}

			b.client, err = pipeline.NewClient(b.rdb, pipeline.ClientConfig{Keys: tc.keys})
			require.NoError(t, err)
			r := b.relay(t, outbox.RelayConfig{})
			require.Eventually(t, func() bool { s := r.Stats(); return s.Relayed+s.Failed > 0 }, time.Minute, 10*time.Millisecond)
			require.Equal(t, tc.want, r.Stats())
			st, err := b.client.Stats(ctx, b.queue)
			require.NoError(t, err)
			require.EqualValues(t, 1, st.Enqueued, "one job")
			if tc.want.Failed > 0 {
				var reason string
				require.NoError(t, b.db.QueryRow(`SELECT error FROM `+outbox.Table+` WHERE id = $1`, id).Scan(&reason))
				require.Contains(t, reason, "different payload")
				return
			}
			require.Zero(t, b.rows(t))
			j, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err)
			require.Equal(t, plain, string(j.Payload))
		})
	}
}
