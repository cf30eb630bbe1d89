package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// GET /v1/workers lists the live workers from their heartbeat records; DELETE of a queue one
// of them reads answers its name and a warning besides the deletion.
func TestWorkersRoute(t *testing.T) {
	t.Parallel()
	e := setup(t)
	type view struct {
		Workers []struct {
			Name        string   `json:"name"`
			Host        string   `json:"host"`
			PID         int      `json:"pid"`
			Version     string   `json:"version"`
			Queues      []string `json:"queues"`
			Concurrency int      `json:"concurrency"`
			Running     []any    `json:"running"`
			StartedAt   int64    `json:"started_at"`
			HeartbeatAt int64    `json:"heartbeat_at"`
		} `json:"workers"`
	}
	r := e.do("GET", "/v1/workers", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"workers":[]}`, string(r.body))

	e.worker() // its first beat is written before it reads
	r = e.do("GET", "/v1/workers", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var v view
	r.json(t, &v)
	require.Len(t, v.Workers, 1, "%s", r.body)
	w := v.Workers[0]
	require.NotEmpty(t, w.Name)
	require.NotEmpty(t, w.Host)
	require.NotZero(t, w.PID)
	require.NotEmpty(t, w.Version)
	require.Equal(t, []string{e.queue}, w.Queues)
	require.Equal(t, 10, w.Concurrency)
	require.NotNil(t, w.Running)
	require.NotZero(t, w.StartedAt)
	require.GreaterOrEqual(t, w.HeartbeatAt, w.StartedAt)

	r = e.do("DELETE", "/v1/queues/"+e.queue+"?force=true", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var del struct {
		Queue   string   `json:"queue"`
		Deleted bool     `json:"deleted"`
		Readers []string `json:"readers"`
		Warning string   `json:"warning"`
	}
	r.json(t, &del)
	require.True(t, del.Deleted)
	require.Equal(t, []string{w.Name}, del.Readers)
	require.Contains(t, del.Warning, w.Name)
	require.Contains(t, del.Warning, "still read queue "+e.queue)

	// A queue nobody reads: no warning.
	_, err := e.client.Enqueue(t.Context(), "unread", pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	r = e.do("DELETE", "/v1/queues/unread?force=true", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"queue":"unread","deleted":true}`, string(r.body))
}
