package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The same workflow id sent again with other payloads is not the same workflow: like a job's id
// (POST .../jobs answers 409 id_taken for another payload), it is refused, not answered as a
// duplicate whose new payloads are silently dropped (it was, when workflow.lua compared only
// the tasks' names, types and dependencies). Other options do not count, as for a job: the
// same tasks and payloads with other retries are the workflow sent again.
func TestWorkflowRepublishWithOtherPayloadConflicts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", e.workflows(), `{"id":"w","tasks":[{"name":"a","type":"echo","payload":{"to":"ada"}}]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"Payload", `{"id":"w","tasks":[{"name":"a","type":"echo","payload":{"to":"bob"}}]}`, http.StatusConflict},
		{"Type", `{"id":"w","tasks":[{"name":"a","type":"sleep","payload":{"to":"ada"}}]}`, http.StatusConflict},
		{"MaxRetries", `{"id":"w","tasks":[{"name":"a","type":"echo","payload":{"to":"ada"},"max_retries":0}]}`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", e.workflows(), tc.body)
			require.Equal(t, tc.want, r.status, "%s", r.body)
		})
	}
}
