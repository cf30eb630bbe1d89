package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// GET /v1/queues/{queue}/jobs/{id}/logs answers a job's lines by attempt, an empty list for a
// job that logged nothing, and 404 for no such job.
func TestJobLogsAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix,
		Backoff: pipeline.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  zerolog.New(e.log).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	w.Handle("logs", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("attempt %d", j.Attempt)
		if j.Attempt == 1 {
			return nil, errors.New("again")
		}
		return nil, nil
	})
	w.Handle("quiet", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	jobtest.RunWorker(t, w)

	ctx := t.Context()
	logged, err := e.client.Enqueue(ctx, e.queue, pipeline.Task{Type: "logs"}, pipeline.WithMaxRetries(2))
	require.NoError(t, err)
	quiet, err := e.client.Enqueue(ctx, e.queue, pipeline.Task{Type: "quiet"})
	require.NoError(t, err)
	for _, id := range []string{logged.ID, quiet.ID} {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := e.client.Wait(wctx, e.queue, id)
		cancel()
		require.NoError(t, err)
	}

	var body struct {
		ID    string `json:"id"`
		Queue string `json:"queue"`
		Logs  []struct {
			Attempt int      `json:"attempt"`
			Outcome string   `json:"outcome"`
			EndedAt int64    `json:"ended_at"`
			Cut     int      `json:"cut"`
			Lines   []string `json:"lines"`
		} `json:"logs"`
	}
	r := e.do("GET", e.jobs()+"/"+logged.ID+"/logs", "")
	require.Equal(t, 200, r.status, "%s", r.body)
	r.json(t, &body)
	require.Equal(t, logged.ID, body.ID)
	require.Equal(t, e.queue, body.Queue)
	require.Len(t, body.Logs, 2)
	require.Equal(t, status.AttemptRetried, body.Logs[0].Outcome)
	require.Equal(t, status.AttemptCompleted, body.Logs[1].Outcome)
	require.Equal(t, 2, body.Logs[1].Attempt)
	require.Len(t, body.Logs[1].Lines, 1)
	require.Contains(t, body.Logs[1].Lines[0], `"message":"attempt 2"`)
	require.NotZero(t, body.Logs[1].EndedAt)

	r = e.do("GET", e.jobs()+"/"+quiet.ID+"/logs", "")
	require.Equal(t, 200, r.status, "%s", r.body)
	require.JSONEq(t, `{"id":"`+quiet.ID+`","queue":"`+e.queue+`","logs":[]}`, string(r.body))

	r = e.do("GET", e.jobs()+"/no-such-job/logs", "")
	require.Equal(t, 404, r.status, "%s", r.body)
}

// With Config.Keys, a job's log lines (sealed by a worker with keys) are shown as its payload
// is: opened to the PayloadToken, as the placeholder with "encrypted" to the AuthToken; and
// lines stored before encryption was turned on are hidden from the AuthToken too.
func TestJobLogsAPISealed(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, keyring.KeySize)))
			require.NoError(t, err)
			rdb := tc.rdb(t)
			e := setup(t, setupOpts{rdb: rdb, cfg: api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k},
				clientCfg: pipeline.ClientConfig{Keys: k, KeepSealed: true}})
			start := func(queue string, keys *keyring.Keyring) {
				w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Prefix: e.prefix,
					Keys: keys, Logger: zerolog.New(e.log).Level(zerolog.WarnLevel)})
				require.NoError(t, err)
				w.Handle("logs", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
					j.Logf("card %s", j.Payload)
					return nil, nil
				})
				jobtest.RunWorker(t, w)
			}
			start(e.queue, k)
			ctx := t.Context()
			const marker = "4111-1111"
			j, err := e.client.Enqueue(ctx, e.queue, pipeline.Task{Type: "logs", Payload: []byte(marker)})
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err = e.client.Wait(wctx, e.queue, j.ID)
			cancel()
			require.NoError(t, err)

			type body struct {
				Logs []struct {
					Outcome   string
					Lines     []string
					Encrypted *struct {
						Key   string
						Bytes int
					}
				}
			}
			path := e.jobs() + "/" + j.ID + "/logs"
			r := e.do("GET", path, "", "Authorization: Bearer pay")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			var opened body
			r.json(t, &opened)
			require.Len(t, opened.Logs, 1)
			require.Nil(t, opened.Logs[0].Encrypted)
			require.Len(t, opened.Logs[0].Lines, 1)
			require.Contains(t, opened.Logs[0].Lines[0], "card "+marker)

			r = e.do("GET", path, "", "Authorization: Bearer auth")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.NotContains(t, string(r.body), marker)
			var sealed body
			r.json(t, &sealed)
			require.Len(t, sealed.Logs, 1)
			require.Equal(t, status.AttemptCompleted, sealed.Logs[0].Outcome)
			require.Len(t, sealed.Logs[0].Lines, 1)
			require.Regexp(t, `^<encrypted, \d+ bytes, key k1>$`, sealed.Logs[0].Lines[0])
			require.NotNil(t, sealed.Logs[0].Encrypted)
			require.Equal(t, "k1", sealed.Logs[0].Encrypted.Key)

			// Lines of a job a worker without keys ran (before encryption was turned on), on a
			// queue of its own.
			plainQ := e.queue + "-plain"
			plainClient, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: e.prefix})
			require.NoError(t, err)
			start(plainQ, nil)
			p, err := plainClient.Enqueue(ctx, plainQ, pipeline.Task{Type: "logs", Payload: []byte(marker)})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				ls, err := e.insp.JobLogs(ctx, plainQ, p.ID)
				return err == nil && len(ls) == 1 && ls[0].Sealed == nil
			}, 20*time.Second, 5*time.Millisecond, "the worker without keys runs the plain job")
			plainPath := "/v1/queues/" + plainQ + "/jobs/" + p.ID + "/logs"
			r = e.do("GET", plainPath, "", "Authorization: Bearer auth")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.NotContains(t, string(r.body), marker, "plain lines hidden from the AuthToken")
			require.Contains(t, string(r.body), `"encrypted":{"key":"k1"`)
			r = e.do("GET", plainPath, "", "Authorization: Bearer pay")
			require.Contains(t, string(r.body), marker)
		})
	}
}
