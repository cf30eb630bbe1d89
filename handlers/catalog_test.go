package handlers

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// The catalog names exactly the handlers of All, sorted, and every example is a payload its
// handler accepts.
func TestCatalog(t *testing.T) {
	t.Parallel()
	cat := Catalog()
	types := make([]string, len(cat))
	for i, in := range cat {
		types[i] = in.Type
		require.NotEmpty(t, in.Summary, in.Type)
		require.NotEmpty(t, in.Payload, in.Type)
		require.NotEmpty(t, in.Result, in.Type)
		require.True(t, json.Valid(in.Example), "%s: example %s", in.Type, in.Example)
	}
	require.Equal(t, slices.Sorted(maps.Keys(All())), types)

	all := All()
	run := func(typ string, attempt int) ([]byte, error) {
		in := cat[slices.Index(types, typ)]
		return all[typ](context.Background(), &pipeline.Job{ID: "j1", Queue: "q", Type: typ, Payload: in.Example, Attempt: attempt})
	}
	res, err := run(TypeEcho, 1)
	require.NoError(t, err)
	require.JSONEq(t, `{"hello":"world"}`, string(res))

	_, err = run(TypeFail, 1)
	require.EqualError(t, err, "boom")
	require.False(t, pipeline.IsSkipRetry(err))

	_, err = run(TypeFlaky, 2)
	require.Error(t, err)
	require.False(t, pipeline.IsSkipRetry(err))
	res, err = run(TypeFlaky, 3)
	require.NoError(t, err)
	require.JSONEq(t, `{"attempt":3}`, string(res))

	res, err = run(TypeNoop, 1)
	require.NoError(t, err)
	require.Nil(t, res)

	// sleep and http would wait or reach the network: check that their payloads are accepted.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Sleep(ctx, &pipeline.Job{Payload: cat[slices.Index(types, TypeSleep)].Example})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, pipeline.IsSkipRetry(err), "the example payload is accepted")
	req, err := newHTTPRequest(context.Background(), cat[slices.Index(types, TypeHTTP)].Example)
	require.NoError(t, err)
	require.Equal(t, "POST", req.Method)
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))

	// Catalog returns a copy.
	cat[0].Example[0] = 'x'
	require.True(t, json.Valid(Catalog()[0].Example))
}
