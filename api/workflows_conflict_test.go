package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The same workflow id sent again with other payloads (or retries, or metadata) is not the same
// workflow: like a job's id (POST .../jobs answers 409 id_taken for another payload), it must be
// refused, not answered as a duplicate whose new payloads are silently dropped. It fails today:
// workflow.lua compares only the tasks' doc (names, types, dependencies), which carries no
// payload, so this is answered 200 with "duplicate": true.
func TestWorkflowRepublishWithOtherPayloadConflicts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", e.workflows(), `{"id":"w","tasks":[{"name":"a","type":"echo","payload":{"to":"ada"}}]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	for name, body := range map[string]string{
		"Payload":    `{"id":"w","tasks":[{"name":"a","type":"echo","payload":{"to":"bob"}}]}`,
		"MaxRetries": `{"id":"w","tasks":[{"name":"a","type":"echo","payload":{"to":"ada"},"max_retries":0}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do("POST", e.workflows(), body)
			require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
		})
	}
}
