package outbox_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestRotateUnderLoad is a key rotation of the outbox under load, as an operator makes it:
// producers keep committing sealed rows (under k1, then, each at its next transaction,
// under k2 with k1 after it) while two relays send them and outbox.Rotate runs again and
// again. At the end every row written is one job, sent once, whose payload opens to the
// plaintext written; no row is set aside; and, after a straggler still on k1 and a last
// Rotate, no row left in PostgreSQL is under k1. A RotateKeys of Redis then leaves every job
// under k2 alone: the rows a relay held while Rotate skipped them went out under k1.
//
// The phases are gated on events: the switch to k2 waits for the relays' first batch and for
// k1 rows committed after it; the relays wait, after that first batch, for a Rotate that
// re-sealed rows, so that the rotation finds rows under k1 to re-seal; the producers go on
// until the rotation ran minRotations times beside the relays.
func TestRotateUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Not a gate: a bound after which a rotation that never returns (chasing the rows written
	// after it began) fails the test rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secret := func() []byte { s := make([]byte, keyring.KeySize); _, _ = rand.Read(s); return s }
	s1, s2 := secret(), secret()
	k1 := newKeyring(t, []string{"k1"}, s1)
	k21 := newKeyring(t, []string{"k2", "k1"}, s2, s1)
	k2 := newKeyring(t, []string{"k2"}, s2)

	const (
		producers    = 4
		minRows      = 1500 // rows the producers write at least
		afterFirst   = 60   // k1 rows committed after the relays' first batch before the switch
		minRotations = 10   // Rotate runs after the first that re-sealed, beside the relays
		stragglers   = 25   // rows a producer still on k1 writes after the relays stopped
		relayBatch   = 20
		rotateBatch  = 7
	)

	var (
		mu      sync.Mutex
		written = map[string]string{} // id: plaintext
		sealed  = map[string]int{}    // key id: rows written under it
	)
	var current atomic.Pointer[keyring.Keyring]
	current.Store(k1)
	var rows, k1After, rotations atomic.Int64
	firstBatch := make(chan struct{}) // the relays relayed rows
	switched := make(chan struct{})   // the producers seal under k2 from their next transaction
	resealed := make(chan struct{})   // a Rotate re-sealed rows
	rotatedEnough := make(chan struct{})
	var firstOnce, switchOnce, resealOnce, enoughOnce sync.Once

	// write commits one transaction of n rows sealed under k and records them.
	write := func(k *keyring.Keyring, prefix string, i, n int) error {
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		plain := map[string]string{}
		for j := range n {
			id := fmt.Sprintf("%s-%d-%d", prefix, i, j)
			p := fmt.Sprintf("payload of %s: %s", id, rand.Text())
			if _, err := outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "t", Payload: []byte(p)},
				outbox.WithID(id), outbox.WithKeys(k)); err != nil {
				return err
			}
			plain[id] = p
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		mu.Lock()
		for id, p := range plain {
			written[id] = p
		}
		sealed[k.Newest()] += n
		mu.Unlock()
		rows.Add(int64(n))
		return nil
	}

	// The relays: after their first batch that relayed rows, each waits (on its own goroutine,
	// between batches, holding no row) for a Rotate to re-seal rows.
	relayCtx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	var relays []*outbox.Relay
	var relayWG sync.WaitGroup
	startRelay := func() *outbox.Relay {
		r, err := outbox.NewRelay(outbox.RelayConfig{Postgres: b.pgURL, Client: b.client, BatchSize: relayBatch,
			OnBatch: func(rb outbox.RelayBatch) {
				if rb.Relayed == 0 {
					return
				}
				firstOnce.Do(func() { close(firstBatch) })
				select {
				case <-resealed:
				case <-t.Context().Done():
				}
			}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		relayWG.Go(func() { assert.NoError(t, r.Run(relayCtx)) })
		return r
	}
	for range 2 {
		relays = append(relays, startRelay())
	}

	// The rotation: Rotate again and again from the switch until the producers are done.
	produced := make(chan struct{})
	var rotateTotal outbox.RotateReport
	var rotateErr error
	rotationEnded := make(chan struct{}) // before produced only when Rotate failed
	var rotateWG sync.WaitGroup
	rotateWG.Go(func() {
		defer close(rotationEnded)
		select {
		case <-switched:
		case <-produced: // the producers failed before the switch: reported below
			return
		}
		for {
			rep, err := outbox.Rotate(ctx, b.db, k21, rotateBatch)
			if err != nil {
				rotateErr = fmt.Errorf("Rotate under load (run %d, %d re-sealed before): %w", rotations.Load()+1, rotateTotal.Resealed, err)
				resealOnce.Do(func() { close(resealed) }) // let the relays go: the test fails
				return
			}
			rotateTotal.Resealed += rep.Resealed
			rotateTotal.Current += rep.Current
			rotateTotal.Failed += rep.Failed
			rotateTotal.Sealed += rep.Sealed
			if rotateTotal.Resealed > 0 {
				resealOnce.Do(func() { close(resealed) })
				if rotations.Add(1) >= minRotations {
					enoughOnce.Do(func() { close(rotatedEnough) })
				}
			}
			select {
			case <-produced:
				return
			default:
			}
		}
	})

	// The producers: each takes the keys current at its transaction's start, so a
	// transaction begun under k1 may commit after the switch, as a process not yet restarted
	// would.
	var prodWG sync.WaitGroup
	errs := make([]error, producers)
	for p := range producers {
		prodWG.Go(func() {
			for i := 0; ; i++ {
				k := current.Load()
				if err := write(k, fmt.Sprintf("p%d", p), i, 1+i%4); err != nil {
					errs[p] = err
					return
				}
				select {
				case <-firstBatch:
					if k == k1 && k1After.Add(int64(1+i%4)) >= afterFirst {
						switchOnce.Do(func() { current.Store(k21); close(switched) })
					}
				default:
				}
				select {
				case <-rotatedEnough:
					if rows.Load() >= minRows {
						return
					}
				case <-rotationEnded:
					return // Rotate failed: reported below
				default:
				}
			}
		})
	}
	prodWG.Wait()
	close(produced)
	rotateWG.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, rotateErr)

	// The relays stop; a producer still on k1 commits a last transaction, and the operator's
	// last Rotate must leave no row under k1.
	stopRelays()
	relayWG.Wait()
	require.NoError(t, write(k1, "straggler", 0, stragglers))
	last, err := outbox.Rotate(ctx, b.db, k21, rotateBatch)
	require.NoError(t, err)
	require.Zero(t, last.Failed)
	require.GreaterOrEqual(t, last.Resealed, stragglers, "the straggler's rows re-sealed")
	left := 0
	func() {
		res, err := b.db.QueryContext(ctx, `SELECT id, payload FROM `+outbox.Table)
		require.NoError(t, err)
		defer res.Close()
		for res.Next() {
			var id string
			var payload []byte
			require.NoError(t, res.Scan(&id, &payload))
			kid, ok := keyring.KeyID(payload)
			require.True(t, ok, "row %s is sealed", id)
			require.Equal(t, "k2", kid, "row %s is under k2 after the last Rotate", id)
			got, err := k2.Open(keyring.Payload, id, payload)
			require.NoError(t, err, id)
			require.Equal(t, written[id], string(got), id)
			left++
		}
		require.NoError(t, res.Err())
	}()

	// A relay sends what is left; every row written is then one job, sent once.
	relayCtx, stopRelays = context.WithCancel(ctx)
	relays = append(relays, startRelay())
	b.waitEmpty(t)
	stopRelays()
	relayWG.Wait()
	var stats outbox.RelayStats
	for _, r := range relays {
		s := r.Stats()
		stats.Relayed += s.Relayed
		stats.Duplicates += s.Duplicates
		stats.Failed += s.Failed
	}
	require.EqualValues(t, len(written), stats.Relayed, "every row relayed once")
	require.Zero(t, stats.Duplicates, "no row sent twice")
	require.Zero(t, stats.Failed, "no row set aside")
	st, err := b.client.Stats(ctx, b.queue)
	require.NoError(t, err)
	require.EqualValues(t, len(written), st.Enqueued, "one job a row")

	// The jobs, read without keys: each opens to what was written; some went out under k1.
	// RotateKeys re-seals those in Redis, after which k2 alone opens every one.
	under := map[string]int{}
	check := func(k *keyring.Keyring) {
		for id, p := range written {
			j, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err, id)
			kid, ok := keyring.KeyID(j.Payload)
			require.True(t, ok, "job %s is sealed", id)
			under[kid]++
			got, err := k.Open(keyring.Payload, id, j.Payload)
			require.NoError(t, err, "job %s", id)
			require.Equal(t, p, string(got), "job %s", id)
		}
	}
	check(k21)
	sentUnder := maps.Clone(under)
	ins, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	rep, err := ins.RotateKeys(ctx, b.queue, k21, pipeline.RotateOptions{})
	require.NoError(t, err)
	require.Zero(t, rep.Total.Left(), "%+v", rep.Total)
	require.Positive(t, sentUnder["k1"], "rows sent under k1 (before the switch, or held by a relay while Rotate skipped them)")
	require.Equal(t, sentUnder["k1"], rep.Total.Resealed, "Redis's rotation re-sealed the jobs sent under k1")
	clear(under)
	check(k2)
	require.Equal(t, map[string]int{"k2": len(written)}, under)

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d rows (%v by the key they were written under), %d rotations beside the relays: %d rows re-sealed; "+
		"after the straggler's %d rows, the last Rotate re-sealed %d, leaving %d rows under k2; jobs sent under %v; Redis's rotation re-sealed %d",
		len(written), sealed, rotations.Load(), rotateTotal.Resealed, stragglers, last.Resealed, left, sentUnder, rep.Total.Resealed)
	require.Positive(t, sealed["k1"]-stragglers, "rows written under k1 while the relays ran")
	require.Positive(t, sealed["k2"], "rows written under k2")
	require.Zero(t, rotateTotal.Failed)
}
