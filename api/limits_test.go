package api_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
)

func TestLimitsAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	base := "/v1/queues/" + e.queue + "/limits"
	type limit struct {
		Queue       string `json:"queue"`
		Type        string `json:"type"`
		PerKey      bool   `json:"per_key"`
		Rate        int    `json:"rate"`
		IntervalMS  int64  `json:"interval_ms"`
		Concurrency int    `json:"concurrency"`
	}
	list := func() []limit {
		t.Helper()
		r := e.do("GET", base, "")
		require.Equal(t, 200, r.status, "%s", r.body)
		var body struct {
			Limits []limit `json:"limits"`
		}
		r.json(t, &body)
		require.NotNil(t, body.Limits, "an empty list is [], not null: %s", r.body)
		return body.Limits
	}

	// A queue that does not exist: 404 for each.
	require.Equal(t, 404, e.do("GET", base, "").status)
	r := e.do("PUT", base, `{"concurrency":1}`)
	require.Equal(t, 404, r.status, "%s", r.body)
	require.Equal(t, "not_found", r.apiErr(t).Code)
	require.Equal(t, 404, e.do("DELETE", base, "").status)

	e.post(`{"type":"echo"}`, 202)
	require.Empty(t, list())

	r = e.do("PUT", base, `{"type":"echo","per_key":true,"rate":10,"interval_ms":60000,"concurrency":2}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	var got limit
	r.json(t, &got)
	require.Equal(t, limit{Queue: e.queue, Type: "echo", PerKey: true, Rate: 10, IntervalMS: 60000, Concurrency: 2}, got)
	r = e.do("PUT", base, `{"rate":100,"interval_ms":1000}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	require.Equal(t, []limit{
		{Queue: e.queue, Rate: 100, IntervalMS: 1000},
		{Queue: e.queue, Type: "echo", PerKey: true, Rate: 10, IntervalMS: 60000, Concurrency: 2},
	}, list())

	// The library's reading agrees.
	ls, err := e.insp.Limits(t.Context(), e.queue)
	require.NoError(t, err)
	require.Len(t, ls, 2)

	for _, bad := range []struct{ body, code, want string }{
		{`{}`, "invalid_argument", "a limit needs a rate or a concurrency"},
		{`{"rate":5}`, "invalid_argument", "interval"},
		{`{"rate":-1,"interval_ms":1000}`, "invalid_argument", "negative"},
		{`{"concurrency":-1}`, "invalid_argument", "negative"},
		{`{"concurrency":1,"interval_ms":1000}`, "invalid_argument", "without a rate"},
		{`{"rate":1,"interval_ms":604800001}`, "invalid_argument", "interval_ms 604800001: want 0 to 604800000"},
		{`{"rate":1,"interval_ms":-9223372036854775808}`, "invalid_argument", "interval_ms"},
		{`{"rate":1000000001,"interval_ms":1000}`, "invalid_argument", "over"},
		{`{"type":"a b","concurrency":1}`, "invalid_argument", "space"},
		{`{"concurrency":1,"queue":"x"}`, "invalid_body", "unknown field"},
		{`{"concurrency":"1"}`, "invalid_body", "concurrency"},
		{`{"concurrency":1.5}`, "invalid_body", "concurrency"},
		{`{"rate":1e20,"interval_ms":1}`, "invalid_body", "rate"},
		{`{"concurrency":1}{}`, "invalid_body", "more than one JSON value"},
		{`[]`, "invalid_body", ""},
		{"{\"type\":\"\xff\",\"concurrency\":1}", "invalid_body", "UTF-8"},
	} {
		t.Run(bad.body, func(t *testing.T) {
			before := list()
			r := e.do("PUT", base, bad.body)
			require.Equal(t, 400, r.status, "%s", r.body)
			ae := r.apiErr(t)
			require.Equal(t, bad.code, ae.Code, ae.Message)
			require.Contains(t, strings.ToLower(ae.Message), strings.ToLower(bad.want))
			require.Equal(t, before, list())
		})
	}
	r = e.do("PUT", base, `{"concurrency":1,"pad":"`+strings.Repeat("x", 5000)+`"}`)
	require.Equal(t, 413, r.status, "%s", r.body)

	// Delete: 204, then 404; a bad per_key is 400.
	require.Equal(t, 400, e.do("DELETE", base+"?type=echo&per_key=maybe", "").status)
	r = e.do("DELETE", base+"?type=echo&per_key=true", "")
	require.Equal(t, 204, r.status, "%s", r.body)
	require.Empty(t, r.body)
	r = e.do("DELETE", base+"?type=echo&per_key=true", "")
	require.Equal(t, 404, r.status, "%s", r.body)
	require.Contains(t, r.apiErr(t).Message, "has no limit for type echo, per limit key")
	require.Equal(t, []limit{{Queue: e.queue, Rate: 100, IntervalMS: 1000}}, list())
	// At most 1,000 scopes (Inspector.SetLimit): a new one past it is a 400 naming the bound.
	const maxQueueLimits = 1000
	vals := make([]any, 0, 2*maxQueueLimits)
	for k := range maxQueueLimits - 1 {
		vals = append(vals, "t:type-"+strconv.Itoa(k), `{"concurrency":1}`)
	}
	require.NoError(t, e.rdb.HSet(t.Context(), keys.New(e.prefix, e.queue).Limits(), vals...).Err())
	r = e.do("PUT", base, `{"type":"another","concurrency":1}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, r.apiErr(t).Message, "limits, the most a queue may have")
	require.NoError(t, e.rdb.Del(t.Context(), keys.New(e.prefix, e.queue).Limits()).Err())
	r = e.do("PUT", base, `{"rate":100,"interval_ms":1000}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	// A limited queue's partitions do not change while it has limits: 400, naming them.
	r = e.do("PUT", "/v1/queues/"+e.queue, `{"partitions":3}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Equal(t, "invalid_argument", r.apiErr(t).Code)
	require.Contains(t, r.apiErr(t).Message, "has 1 limit (every job): limits are not supported on a partitioned queue")
	require.Equal(t, 204, e.do("DELETE", base, "").status)
	require.Empty(t, list())

	// A partitioned queue is refused.
	require.Equal(t, 200, e.do("PUT", "/v1/queues/"+e.queue+"-p", `{"partitions":2}`).status)
	r = e.do("PUT", "/v1/queues/"+e.queue+"-p/limits", `{"concurrency":1}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Contains(t, r.apiErr(t).Message, "limits are not supported on a partitioned queue")
}
