package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeJob feeds the job body decoder arbitrary bytes, alone and as a batch's one job.
// It must never panic; a refusal is a 400 with a stable code and a message, and an accepted
// body has a type and a payload that is compact, valid JSON. The seed corpus is
// testdata/fuzz/FuzzDecodeJob (valid and invalid bodies); run it longer with
//
//	go test -fuzz=FuzzDecodeJob ./api/
func FuzzDecodeJob(f *testing.F) {
	f.Add([]byte(`{"type":"echo","payload":{"n":1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeJob(bytes.NewReader(body), "")
		checkDecoded(t, req, err)

		batch := append(append([]byte(`{"jobs":[`), body...), "]}"...)
		reqs, err := decodeBatch(bytes.NewReader(batch), "key")
		if err == nil {
			require.NotEmpty(t, reqs)
			for _, req := range reqs {
				checkDecoded(t, req, nil)
			}
		} else {
			checkDecoded(t, nil, err)
		}
	})
}

func checkDecoded(t *testing.T, req *jobRequest, err error) {
	t.Helper()
	if err != nil {
		var ae *apiError
		require.True(t, errors.As(err, &ae), "%T %v", err, err)
		require.Equal(t, http.StatusBadRequest, ae.Status, ae.Message)
		require.Contains(t, []string{CodeInvalidBody, CodeInvalidArgument}, ae.Code)
		require.NotEmpty(t, ae.Message)
		require.Nil(t, req)
		return
	}
	require.NotNil(t, req)
	require.NotEmpty(t, req.task.Type)
	if req.task.Payload != nil {
		require.True(t, json.Valid(req.task.Payload), "%q", req.task.Payload)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, req.task.Payload))
		require.Equal(t, compact.Bytes(), req.task.Payload)
	}
}

func TestDecodeJob(t *testing.T) {
	t.Parallel()
	req, err := decodeJob(bytes.NewReader([]byte(`{"type":"echo","payload":{ "a" : [1, 2] },"metadata":{"k":"v"},
		"delay":"1s","max_retries":0,"timeout":"2s","retention":"0s","unique":{"key":"u"}}`)), "idem-1")
	require.NoError(t, err)
	require.Equal(t, "echo", req.task.Type)
	require.Equal(t, `{"a":[1,2]}`, string(req.task.Payload))
	require.Equal(t, map[string]string{"k": "v"}, req.task.Metadata)
	require.Len(t, req.opts, 6, "id, delay, max_retries, timeout, retention, unique")
}
