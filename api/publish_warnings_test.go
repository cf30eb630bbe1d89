package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A publish to a queue no live worker has read, or of a type none has handled, is accepted as
// ever and told so: "warnings" in the body and a Warning header each (RFC 7234's form). A
// right one says nothing.
func TestPublishWarnings(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.worker("emails") // its first beat is written before it reads

	queueTypo := `no worker has read queue "emials" in the last 10m0s (known queues read: emails)`
	typeTypo := `no worker has handled type "ecoh" on any queue in the last 10m0s (did you mean "echo"?)`
	cases := []struct {
		name, path, body string
		status           int
		want             []string
	}{
		{"QueueTypo", "/v1/queues/emials/jobs", `{"type":"echo"}`, http.StatusAccepted, []string{queueTypo}},
		{"TypeTypo", "/v1/queues/emails/jobs", `{"type":"ecoh"}`, http.StatusAccepted, []string{typeTypo}},
		{"Right", "/v1/queues/emails/jobs", `{"type":"echo"}`, http.StatusAccepted, nil},
		{"BatchQueueTypo", "/v1/queues/emials/jobs:batch", `{"jobs":[{"type":"echo"},{"type":"ecoh"}]}`,
			http.StatusAccepted, []string{queueTypo}},
		{"BatchTypeTypo", "/v1/queues/emails/jobs:batch", `{"jobs":[{"type":"echo"},{"type":"ecoh"},{"type":"ecoh"}]}`,
			http.StatusAccepted, []string{typeTypo}},
		{"BatchRight", "/v1/queues/emails/jobs:batch", `{"jobs":[{"type":"echo"}]}`, http.StatusAccepted, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", c.path, c.body)
			require.Equal(t, c.status, r.status, "%s", r.body)
			var body struct {
				ID       string   `json:"id"`
				Jobs     []any    `json:"jobs"`
				Warnings []string `json:"warnings"`
			}
			r.json(t, &body)
			require.True(t, body.ID != "" || len(body.Jobs) > 0, "the jobs are answered as before: %s", r.body)
			require.Equal(t, c.want, body.Warnings, "%s", r.body)
			if c.want == nil {
				require.NotContains(t, string(r.body), `"warnings"`, "omitted when there are none")
			}
			var headers []string
			for _, w := range c.want {
				headers = append(headers, warningHeader(w))
			}
			require.Equal(t, headers, r.header.Values("Warning"))
		})
	}
}

// warningHeader is w as a Warning header's value: code 199 (miscellaneous), agent conveyor,
// the text a quoted-string.
func warningHeader(w string) string {
	q := []byte(`199 conveyor "`)
	for i := range len(w) {
		if w[i] == '"' || w[i] == '\\' {
			q = append(q, '\\')
		}
		q = append(q, w[i])
	}
	return string(append(q, '"'))
}
