package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestJobLogsSealed: a worker with keys seals an attempt's lines each time it sends them, the
// progress report's running item and the outcome's alike. The logs key holds no byte of what
// the handler logged; a reader with the key reads the lines, one without reads the placeholder
// and the key's id.
func TestJobLogsSealed(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		k := testKeys(t, "k1")
		b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Keys: k}})
		keyed, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Keys: k})
		require.NoError(t, err)
		release := make(chan struct{})
		b.startWorker(t, pipeline.WorkerConfig{Keys: k}, map[string]pipeline.HandlerFunc{
			"log": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				j.Logf("card %s", j.Payload)
				if err := j.Progress(ctx, 50, "half"); err != nil {
					return nil, err
				}
				<-release
				j.Logger().Info().Str("card", string(j.Payload)).Msg("done")
				return nil, nil
			},
		})
		const marker = "MARKER4242"
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "log", Payload: []byte(marker)})
		require.NoError(t, err)

		// The progress report wrote the running item, sealed.
		var running []pipeline.AttemptLog
		require.Eventually(t, func() bool {
			running, err = keyed.JobLogs(ctx, b.queue, j.ID)
			return err == nil && len(running) == 1
		}, 20*time.Second, 5*time.Millisecond)
		require.Equal(t, status.AttemptRunning, running[0].Outcome)
		require.Nil(t, running[0].Sealed)
		require.Len(t, running[0].Lines, 1)
		require.Contains(t, running[0].Lines[0], "card "+marker)
		raw, err := b.rdb.LRange(ctx, b.q.Logs(j.ID), 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, raw, 1)
		require.NotContains(t, raw[0], marker, "a running item's lines in plain text")
		require.True(t, strings.HasPrefix(raw[0], "1 running "), "the head stays plain: %q", raw[0])

		close(release)
		b.waitStatus(t, j.ID, status.Completed)
		raw, err = b.rdb.LRange(ctx, b.q.Logs(j.ID), 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, raw, 1, "the outcome's item replaced the running one")
		require.NotContains(t, raw[0], marker, "the outcome's lines in plain text")
		require.True(t, strings.HasPrefix(raw[0], "1 completed "), "the head stays plain: %q", raw[0])

		logs, err := keyed.JobLogs(ctx, b.queue, j.ID)
		require.NoError(t, err)
		require.Len(t, logs, 1)
		require.Equal(t, status.AttemptCompleted, logs[0].Outcome)
		require.Len(t, logs[0].Lines, 2)
		require.Contains(t, logs[0].Lines[0], "card "+marker)
		require.Contains(t, logs[0].Lines[1], `"card":"`+marker+`"`)

		// Without the key: one line, the placeholder, and what is sealed.
		logs, err = b.insp.JobLogs(ctx, b.queue, j.ID)
		require.NoError(t, err)
		require.Len(t, logs, 1)
		require.Equal(t, status.AttemptCompleted, logs[0].Outcome)
		require.Len(t, logs[0].Lines, 1)
		require.Regexp(t, `^<encrypted, \d+ bytes, key k1>$`, logs[0].Lines[0])
		id, ok := keyring.KeyID(logs[0].Sealed)
		require.True(t, ok)
		require.Equal(t, "k1", id)
		out, err := json.Marshal(logs[0])
		require.NoError(t, err)
		require.NotContains(t, string(out), marker)
		var w struct {
			Lines     []string
			Encrypted *struct {
				Key   string
				Bytes int
			}
		}
		require.NoError(t, json.Unmarshal(out, &w))
		require.NotNil(t, w.Encrypted, "%s", out)
		require.Equal(t, "k1", w.Encrypted.Key)
		require.Positive(t, w.Encrypted.Bytes)

		// Open with the key, as a server does per caller; bound to the job: another id fails.
		other := logs[0]
		require.ErrorIs(t, other.Open(k, "another-job"), keyring.ErrCorrupt)
		require.NotNil(t, other.Sealed)
		require.NoError(t, logs[0].Open(k, j.ID))
		require.Nil(t, logs[0].Sealed)
		require.Len(t, logs[0].Lines, 2)
		require.Contains(t, logs[0].Lines[0], "card "+marker)
		// A keyring without the key leaves them sealed, and says which key.
		require.ErrorIs(t, other.Open(testKeys(t, "k9"), j.ID), keyring.ErrUnknownKey)
	})
}

// TestAttemptLogSeal: plain lines (stored before encryption was turned on) seal to the
// placeholder, and open back to the same lines.
func TestAttemptLogSeal(t *testing.T) {
	k := testKeys(t, "k1")
	a := pipeline.AttemptLog{Attempt: 1, Lines: []string{`{"message":"a"}`, `{"message":"b"}`}}
	a.Seal(k, "j1")
	require.Len(t, a.Lines, 1)
	require.Equal(t, "<encrypted, 31 bytes, key k1>", a.Lines[0])
	require.NoError(t, a.Open(k, "j1"))
	require.Equal(t, []string{`{"message":"a"}`, `{"message":"b"}`}, a.Lines)
	var none pipeline.AttemptLog
	none.Seal(k, "j1")
	require.Nil(t, none.Sealed, "no lines: nothing to seal")
}

// TestRotateKeysLogs: RotateKeys re-seals the lines of every attempt under the newest key,
// their heads kept plain, and seals lines a worker without keys stored plain; a second run
// finds them current. Afterwards the newest key alone opens them.
func TestRotateKeysLogs(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := t.Context()
		k1, k21, k2 := rotateKeys(t)
		b := setup(t, setupOpts{rdb: rdb})
		plainQ := b.queue + "-plain"
		handler := map[string]pipeline.HandlerFunc{
			"log": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				j.Logf("attempt %d of %s", j.Attempt, j.ID)
				if j.Attempt == 1 {
					return nil, errors.New("again")
				}
				return nil, nil
			},
		}
		fast := pipeline.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}
		b.startWorker(t, pipeline.WorkerConfig{Keys: k1, Backoff: fast}, handler)
		startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{plainQ}, Backoff: fast}, handler)
		sealedJob, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "log"}, pipeline.WithMaxRetries(2))
		require.NoError(t, err)
		plainJob, err := b.client.Enqueue(ctx, plainQ, pipeline.Task{Type: "log"}, pipeline.WithMaxRetries(2))
		require.NoError(t, err)
		b.waitStatus(t, sealedJob.ID, status.Completed)
		waitJob(t, b.client, plainQ, plainJob.ID, status.Completed)

		// Queue by queue: the server may be shared with other tests' queues.
		rep, err := b.insp.RotateKeys(ctx, b.queue, k21, pipeline.RotateOptions{Batch: 1})
		require.NoError(t, err)
		require.Equal(t, 2, rep.Places[pipeline.RotateLogs].Resealed, "the keyed job's two attempts: %+v", rep.Places[pipeline.RotateLogs])
		require.Zero(t, rep.Total.Left())
		rep, err = b.insp.RotateKeys(ctx, plainQ, k21, pipeline.RotateOptions{Batch: 1})
		require.NoError(t, err)
		require.Equal(t, 2, rep.Places[pipeline.RotateLogs].Sealed, "the plain job's two attempts: %+v", rep.Places[pipeline.RotateLogs])
		require.Zero(t, rep.Total.Left())

		keyed, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Keys: k2})
		require.NoError(t, err)
		for _, j := range []struct{ queue, id string }{{b.queue, sealedJob.ID}, {plainQ, plainJob.ID}} {
			logs, err := keyed.JobLogs(ctx, j.queue, j.id)
			require.NoError(t, err)
			require.Len(t, logs, 2)
			require.Equal(t, status.AttemptRetried, logs[0].Outcome)
			require.Equal(t, status.AttemptCompleted, logs[1].Outcome)
			for n, l := range logs {
				require.Nil(t, l.Sealed, "opened with k2 alone")
				require.Len(t, l.Lines, 1)
				require.Contains(t, l.Lines[0], fmt.Sprintf("attempt %d of %s", n+1, j.id))
			}
		}
		for _, queue := range []string{b.queue, plainQ} {
			rep, err = b.insp.RotateKeys(ctx, queue, k21, pipeline.RotateOptions{})
			require.NoError(t, err)
			require.Zero(t, rep.Total.Changed(), "%+v", rep.Total)
			require.Equal(t, 2, rep.Places[pipeline.RotateLogs].Current)
		}
	})
}
