package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueueSettingsAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	base := "/v1/queues/" + e.queue + "/settings"
	require.Equal(t, 404, e.do("GET", base, "").status)
	r := e.do("PATCH", base, `{"concurrency":2}`)
	require.Equal(t, 404, r.status, "%s", r.body)
	e.post(`{"type":"echo","priority":3}`, 202)

	type view struct {
		Queue        string         `json:"queue"`
		Revision     int64          `json:"revision"`
		Paused       bool           `json:"paused"`
		Partitions   int            `json:"partitions"`
		GroupWindow  int            `json:"group_window"`
		GroupWeights map[string]int `json:"group_weights"`
		Levels       []int          `json:"levels"`
		MaxRetries   *int           `json:"max_retries"`
		TimeoutMS    int64          `json:"timeout_ms"`
		Limits       []struct {
			Queue       string `json:"queue"`
			Concurrency int    `json:"concurrency"`
		} `json:"limits"`
	}
	r = e.do("PATCH", base, `{"paused":true,"concurrency":2,"group_window":4,"group_weights":{"tenant-7":3},
		"max_retries":9,"timeout_ms":1500}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	var got view
	r.json(t, &got)
	require.Equal(t, e.queue, got.Queue)
	require.True(t, got.Paused)
	require.Equal(t, 1, got.Partitions)
	require.Equal(t, 4, got.GroupWindow)
	require.Equal(t, map[string]int{"tenant-7": 3}, got.GroupWeights)
	require.Equal(t, []int{3}, got.Levels)
	require.Equal(t, 9, *got.MaxRetries)
	require.EqualValues(t, 1500, got.TimeoutMS)
	var job struct {
		MaxRetries int   `json:"max_retries"`
		TimeoutMS  int64 `json:"timeout_ms"`
	}
	e.post(`{"type":"echo"}`, 202).json(t, &job)
	require.Equal(t, 9, job.MaxRetries, "a job published without its own takes the queue's")
	require.EqualValues(t, 1500, job.TimeoutMS)
	require.Len(t, got.Limits, 1)
	require.Equal(t, 2, got.Limits[0].Concurrency)
	require.Equal(t, e.queue, got.Limits[0].Queue)
	rev := got.Revision

	r = e.do("GET", base, "")
	require.Equal(t, 200, r.status, "%s", r.body)
	var again view
	r.json(t, &again)
	require.Equal(t, got, again)

	// Refused at the edge: 400, nothing changed.
	for _, body := range []string{`{"concurrency":-1}`, `{"partitions":0}`, `{"group_window":-1}`, `{"pause":true}`, `[]`,
		`{"max_retries":-2}`, `{"timeout_ms":-1}`, `{"timeout_ms":99999999999999}`} {
		r = e.do("PATCH", base, body)
		require.Equal(t, 400, r.status, "%s: %s", body, r.body)
	}
	r = e.do("GET", base, "")
	r.json(t, &again)
	require.Equal(t, rev, again.Revision)
}
