package api_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// testKeys are the keys of the rotation tests: k1 alone (what the values are sealed under)
// and "k2, k1" (the server's keyring, which re-seals them under k2).
func testKeys(t *testing.T) (k1, k21 *keyring.Keyring) {
	t.Helper()
	s1, s2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, keyring.KeySize)),
		base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, keyring.KeySize))
	k1, err := keyring.Parse("k1 " + s1)
	require.NoError(t, err)
	k21, err = keyring.Parse("k2 " + s2 + "\nk1 " + s1)
	require.NoError(t, err)
	return k1, k21
}

// rotateView is the answer of POST /v1/keys/rotate as a client reads it.
type rotateView struct {
	Key    string                           `json:"key"`
	Queues []string                         `json:"queues"`
	Places map[string]pipeline.RotateCounts `json:"places"`
	Total  pipeline.RotateCounts            `json:"total"`
	Cursor string                           `json:"cursor"`
	Done   bool                             `json:"done"`
	Outbox any                              `json:"outbox"`
}

// TestKeysRotate (issue 35): POST /v1/keys/rotate re-seals what a queue stores under the
// server's newest key, in calls bounded by "max" that go on from each other's cursor
// (done false, then true) and whose counts add up to those of one call through everything;
// the values then open with the new key to what was published, and the server's log names
// the caller's token. GET /v1/keys lists the ids, the sealing one first.
func TestKeysRotate(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k1, k21 := testKeys(t)
			rdb := tc.rdb(t)
			e := setup(t, setupOpts{rdb: rdb, cfg: api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k21},
				clientCfg: pipeline.ClientConfig{Keys: k21, KeepSealed: true}})
			old, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: e.prefix, Keys: k1})
			require.NoError(t, err)
			other := e.queue + "-b"
			plain, queueOf := map[string]string{}, map[string]string{}
			for i := range 12 {
				id, q := fmt.Sprintf("job-%d", i), e.queue
				var opts []pipeline.Option
				if i%2 == 1 {
					q = other
				}
				if i%3 == 0 {
					opts = append(opts, pipeline.WithDelay(time.Hour))
				}
				plain[id], queueOf[id] = fmt.Sprintf(`{"n":%d}`, i), q
				_, err := old.Enqueue(t.Context(), q, pipeline.Task{Type: "t", Payload: []byte(plain[id])}, append(opts, pipeline.WithID(id))...)
				require.NoError(t, err)
			}
			const pay = "Authorization: Bearer pay"

			r := e.do("GET", "/v1/keys", "", "Authorization: Bearer auth")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.JSONEq(t, `{"keys":["k2","k1"],"sealing":"k2","can_rotate":false}`, string(r.body))
			r = e.do("GET", "/v1/keys", "", pay)
			require.JSONEq(t, `{"keys":["k2","k1"],"sealing":"k2","can_rotate":true}`, string(r.body))

			// calls rotates in calls of body until done, and sums their counts.
			calls := func(body string) (sum pipeline.RotateCounts, n int) {
				cursor := ""
				for {
					n++
					require.Less(t, n, 100, "the calls do not end")
					b := body
					if cursor != "" {
						b = strings.TrimSuffix(body, "}") + `,"cursor":"` + cursor + `"}`
					}
					r := e.do("POST", "/v1/keys/rotate", b, pay)
					require.Equal(t, http.StatusOK, r.status, "%s", r.body)
					var v rotateView
					r.json(t, &v)
					require.Equal(t, "k2", v.Key)
					require.Nil(t, v.Outbox, "the server does not reach the outbox")
					require.Equal(t, v.Cursor == "", v.Done, "%s", r.body)
					sum.Resealed += v.Total.Resealed
					sum.Sealed += v.Total.Sealed
					sum.Current += v.Total.Current
					sum.MovedOn += v.Total.MovedOn
					sum.Running += v.Total.Running
					sum.Failed += v.Total.Failed
					if v.Done {
						return sum, n
					}
					cursor = v.Cursor
				}
			}
			sum, n := calls(`{"max":1,"batch":1}`)
			require.Greater(t, n, 2, "max stops a call: done false, then true")
			require.Equal(t, pipeline.RotateCounts{Resealed: len(plain)}, sum)
			for id, want := range plain {
				j, err := e.insp.Get(t.Context(), queueOf[id], id)
				require.NoError(t, err)
				kid, ok := keyring.KeyID(j.Payload)
				require.True(t, ok, "%s is sealed", id)
				require.Equal(t, "k2", kid, id)
				got, err := k21.Open(keyring.Payload, id, j.Payload)
				require.NoError(t, err)
				require.Equal(t, want, string(got))
			}
			// At info level: a server's log (serve's, at info) records every rotation and who called it.
			require.Regexp(t, `\{"level":"info","who":"payload_token","queue":"","key":"k2",[^\n]*"message":"keys rotated"\}`, e.log.String())

			// Everything current now: bounded calls count what one call through everything does.
			sum, _ = calls(`{"max":2,"batch":1}`)
			one, _ := calls(`{}`)
			require.Equal(t, pipeline.RotateCounts{Current: len(plain)}, one)
			require.Equal(t, one, sum)
			r = e.do("POST", "/v1/keys/rotate", `{"queue":"`+other+`"}`, pay)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			var v rotateView
			r.json(t, &v)
			require.Equal(t, []string{other}, v.Queues)
			require.Equal(t, len(plain)/2, v.Total.Current)
		})
	}
}

// TestKeysRotateRefused: who may rotate (a table of servers and tokens), what a server
// without keys answers, and the bodies refused.
func TestKeysRotateRefused(t *testing.T) {
	_, k21 := testKeys(t)
	const auth, pay, wrong = "Authorization: Bearer auth", "Authorization: Bearer pay", "Authorization: Bearer wrong"
	for _, tc := range []struct {
		name   string
		cfg    api.Config
		header string
		status int
		code   string
		reason string
	}{
		{"payload token", api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k21}, pay, http.StatusOK, "", ""},
		{"API token where a payload token is set", api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k21}, auth,
			http.StatusForbidden, api.CodeForbidden, api.ReasonPayloadTokenRequired},
		{"no token", api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k21}, "", http.StatusUnauthorized, api.CodeUnauthorized, ""},
		{"wrong token", api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k21}, wrong, http.StatusUnauthorized, api.CodeUnauthorized, ""},
		{"API token, no payload token set", api.Config{AuthToken: "auth", Keys: k21}, auth, http.StatusOK, "", ""},
		{"no token on loopback, no payload token set", api.Config{Keys: k21}, "", http.StatusOK, "", ""},
		{"no token on loopback where a payload token is set", api.Config{PayloadToken: "pay", Keys: k21}, "",
			http.StatusForbidden, api.CodeForbidden, api.ReasonPayloadTokenRequired},
		{"no keys", api.Config{AuthToken: "auth"}, auth, http.StatusConflict, api.CodeConflict, api.ReasonNoKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, setupOpts{cfg: tc.cfg})
			var hs []string
			if tc.header != "" {
				hs = append(hs, tc.header)
			}
			r := e.do("POST", "/v1/keys/rotate", "", hs...)
			require.Equal(t, tc.status, r.status, "%s", r.body)
			if tc.code != "" {
				ae := r.apiErr(t)
				require.Equal(t, tc.code, ae.Code)
				require.Equal(t, tc.reason, ae.Reason)
			}
			if tc.status == http.StatusForbidden || tc.status == http.StatusConflict {
				require.NotContains(t, e.log.String(), "keys rotated", "a refused call rotates nothing")
			}
		})
	}

	t.Run("no keys: the ids", func(t *testing.T) {
		e := setup(t, setupOpts{cfg: api.Config{AuthToken: "auth"}})
		r := e.do("GET", "/v1/keys", "", auth)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, `{"keys":[],"can_rotate":false}`, string(r.body))
	})

	t.Run("bodies", func(t *testing.T) {
		e := setup(t, setupOpts{cfg: api.Config{AuthToken: "auth", PayloadToken: "pay", Keys: k21}})
		for body, want := range map[string]string{
			`{"batch":0}`:               api.CodeInvalidArgument,
			`{"batch":1001}`:            api.CodeInvalidArgument,
			`{"max":0}`:                 api.CodeInvalidArgument,
			`{"cursor":"not-a-cursor"}`: api.CodeInvalidArgument,
			`{"queue":"bad queue"}`:     api.CodeInvalidArgument,
			`{"sure":true}`:             api.CodeInvalidBody,
			`[`:                         api.CodeInvalidBody,
			`{"queue":"no-such-queue"}`: api.CodeNotFound,
		} {
			r := e.do("POST", "/v1/keys/rotate", body, pay)
			require.Equal(t, want, r.apiErr(t).Code, "%s: %s", body, r.body)
		}
		r := e.request("POST", "/v1/keys/rotate", "", pay)
		require.Equal(t, http.StatusForbidden, r.status, "a POST without X-Conveyor-Request or a JSON body: %s", r.body)
		require.Equal(t, api.CodeForbidden, r.apiErr(t).Code)
		require.Empty(t, r.apiErr(t).Reason)
		r = e.do("GET", "/v1/keys", "", pay)
		require.NotContains(t, string(r.body), base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, keyring.KeySize)))
	})
}
