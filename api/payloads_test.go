package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	stdjson "encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestPayloadToken: with a keyring, a request with the PayloadToken sees payloads and results
// opened; one with the AuthToken sees "<encrypted, N bytes, key K>" and the "encrypted" field,
// the answer to its own publish included.
func TestPayloadToken(t *testing.T) {
	k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, keyring.KeySize)))
	require.NoError(t, err)
	e := setup(t, setupOpts{cfg: api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k},
		clientCfg: pipeline.ClientConfig{Keys: k, KeepSealed: true}})
	w, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix,
		Keys: k, Logger: zerolog.New(e.log).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return bytes.Clone(j.Payload), nil })
	jobtest.RunWorker(t, w)

	const auth, pay = "Authorization: Bearer auth", "Authorization: Bearer pay"
	const payload = `{"card":"4111-1111"}`
	placeholder := "<encrypted, 20 bytes, key k1>"
	type view struct {
		ID        string
		Status    status.Status
		Payload   any
		Result    any
		Encrypted map[string]struct {
			Key   string
			Bytes int
		}
	}
	r := e.post(`{"type":"echo","payload":`+payload+`}`, http.StatusAccepted, auth)
	var v view
	r.json(t, &v)
	require.Equal(t, placeholder, v.Payload, "the AuthToken sees its own publish sealed")
	require.Equal(t, "k1", v.Encrypted["payload"].Key)
	require.Equal(t, 20, v.Encrypted["payload"].Bytes)
	require.NotContains(t, string(r.body), "4111")

	r = e.post(`{"type":"echo","payload":`+payload+`}`, http.StatusAccepted, pay)
	var pv view
	r.json(t, &pv)
	require.Equal(t, map[string]any{"card": "4111-1111"}, pv.Payload)
	require.Nil(t, pv.Encrypted)

	path := e.jobs() + "/" + v.ID
	require.Eventually(t, func() bool {
		r := e.do("GET", path, "", pay)
		var got view
		return r.status == http.StatusOK && decodes(r.body, &got) && got.Status == status.Completed
	}, 20*time.Second, 10*time.Millisecond)

	// One job read: opened for the PayloadToken, sealed for the AuthToken.
	r = e.do("GET", path, "", pay)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var opened view
	r.json(t, &opened)
	require.Equal(t, map[string]any{"card": "4111-1111"}, opened.Payload)
	require.Equal(t, map[string]any{"card": "4111-1111"}, opened.Result)
	require.Nil(t, opened.Encrypted)
	r = e.do("GET", path, "", auth)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var sealed view
	r.json(t, &sealed)
	require.Equal(t, placeholder, sealed.Payload)
	require.Equal(t, placeholder, sealed.Result)
	require.Len(t, sealed.Encrypted, 2)
	require.NotContains(t, string(r.body), "4111")

	// A listing, a long poll and the job's events alike.
	for _, p := range []string{e.jobs() + "?status=completed", "/v1/jobs?status=completed", path + "?wait=1s", path + "/events"} {
		r = e.do("GET", p, "", auth)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", p, r.body)
		require.NotContains(t, string(r.body), "4111", p)
		require.Contains(t, string(r.body), "encrypted, 20 bytes, key k1", p) // '<' is escaped in JSON
		r = e.do("GET", p, "", pay)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", p, r.body)
		require.Contains(t, string(r.body), "4111-1111", p)
		require.NotContains(t, string(r.body), "encrypted, ", p)
	}

	// Neither token: refused.
	for _, h := range []string{"", "Authorization: Bearer wrong"} {
		var hs []string
		if h != "" {
			hs = append(hs, h)
		}
		require.Equal(t, http.StatusUnauthorized, e.do("GET", path, "", hs...).status)
	}
}

func decodes(b []byte, v any) bool { return stdjson.Unmarshal(b, v) == nil }

// TestPayloadTokenConfig: a PayloadToken needs a keyring and differs from the AuthToken.
func TestPayloadTokenConfig(t *testing.T) {
	rdb := redistest.Client(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	i, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(make([]byte, keyring.KeySize)))
	require.NoError(t, err)
	_, err = api.New(c, i, api.Config{PayloadToken: "p"})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.True(t, strings.Contains(err.Error(), "needs Keys"), err.Error())
	_, err = api.New(c, i, api.Config{PayloadToken: "p", AuthToken: "p", Keys: k})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// TestResendAcrossKeySwitch: a job published under k1, POSTed again with its id and the same
// payload to a server whose keyring lists k2 first, is the job found (200), as any publish sent
// again: the server's Client compares the plaintexts (pipeline.ClientConfig.Keys). Another
// payload is 409.
func TestResendAcrossKeySwitch(t *testing.T) {
	s1, s2 := bytes.Repeat([]byte{1}, keyring.KeySize), bytes.Repeat([]byte{2}, keyring.KeySize)
	k1, err := keyring.New([]string{"k1"}, [][]byte{s1})
	require.NoError(t, err)
	k21, err := keyring.New([]string{"k2", "k1"}, [][]byte{s2, s1})
	require.NoError(t, err)
	e := setup(t, setupOpts{cfg: api.Config{Keys: k21}, clientCfg: pipeline.ClientConfig{Keys: k21, KeepSealed: true}})
	before, err := pipeline.NewClient(e.rdb, pipeline.ClientConfig{Prefix: e.prefix, Keys: k1})
	require.NoError(t, err)
	_, err = before.Enqueue(t.Context(), e.queue, pipeline.Task{Type: "echo", Payload: []byte(`{"n":1}`)}, pipeline.WithID("x"))
	require.NoError(t, err)

	r := e.post(`{"type":"echo","payload":{"n":1}}`, http.StatusOK, "Idempotency-Key: x")
	require.Equal(t, "x", r.job(t).ID)
	r = e.post(`{"type":"echo","payload":{"n":2}}`, http.StatusConflict, "Idempotency-Key: x")
	require.Equal(t, "id_taken", r.apiErr(t).Reason)
	st, err := e.client.Stats(t.Context(), e.queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Enqueued)
}
