package api_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
)

func TestGroupsAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	base := "/v1/queues/" + e.queue + "/groups"

	// A queue that does not exist: 404 for both.
	require.Equal(t, 404, e.do("GET", base, "").status)
	r := e.do("PUT", base, `{"window":2}`)
	require.Equal(t, 404, r.status, "%s", r.body)
	require.Equal(t, "not_found", r.apiErr(t).Code)

	r = e.do("PUT", base, `{"window":1}`)
	require.Equal(t, 404, r.status, "%s", r.body)
	e.post(`{"type":"echo","group":"tenant-42"}`, 202)
	r = e.do("PUT", base, `{"window":1,"weights":{"tenant-7":3}}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	e.post(`{"type":"echo","group":"tenant-42"}`, 202)

	r = e.do("GET", base, "")
	require.Equal(t, 200, r.status, "%s", r.body)
	var got pipeline.Groups
	r.json(t, &got)
	require.Equal(t, pipeline.Groups{Queue: e.queue, Window: 1, WindowSet: true, Groups: []pipeline.GroupInfo{
		{Group: "tenant-42", Weight: 1, InWindow: 1, Waiting: 1},
		{Group: "tenant-7", Weight: 3},
	}, Total: 2}, got)

	// The job's group in its record, the waiting one in the queue's stats.
	r = e.do("GET", "/v1/queues/"+e.queue, "")
	require.Equal(t, 200, r.status, "%s", r.body)
	var st struct {
		Queued       int64 `json:"queued"`
		GroupWaiting int64 `json:"group_waiting"`
	}
	r.json(t, &st)
	require.EqualValues(t, 2, st.Queued)
	require.EqualValues(t, 1, st.GroupWaiting)

	// Refused at the edge: 400 with nothing changed.
	for _, body := range []string{`{"window":-1}`, `{"weights":{"a b":2}}`, `{"weights":{"a":1001}}`,
		`{"window":2,"reset_window":true}`, `{"windows":2}`} {
		r = e.do("PUT", base, body)
		require.Equal(t, 400, r.status, "%s: %s", body, r.body)
	}
	for _, body := range []string{`{"type":"echo","group":""}`, `{"type":"echo","group":"a/b"}`} {
		e.post(body, 400)
	}
	// At most 1,000 weights (Inspector.SetGroups): past it, 400 naming the bound.
	const maxGroupWeights = 1000
	vals := make([]any, 0, 2*maxGroupWeights)
	for k := range maxGroupWeights {
		vals = append(vals, fmt.Sprintf("%sg%d", keys.GroupWeightPrefix, k), "2")
	}
	require.NoError(t, e.rdb.HSet(t.Context(), keys.New(e.prefix, e.queue).GroupConfig(), vals...).Err())
	r = e.do("PUT", base, `{"weights":{"one-more":2}}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, r.apiErr(t).Message, "groups with a weight")
}
