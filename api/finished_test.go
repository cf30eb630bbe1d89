package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Issue 20: completed and canceled jobs are listed, newest first, and a job carries its
// attempts.
func TestListFinished(t *testing.T) {
	t.Parallel()
	e := setup(t)
	done := []string{e.seed(status.Completed), e.seed(status.Completed), e.seed(status.Completed)}
	canceled := e.seed(status.Canceled)

	var page struct {
		Jobs []apiJob `json:"jobs"`
		Next string   `json:"next"`
	}
	var seen []string
	cursor := ""
	for pages := 1; ; pages++ {
		r := e.do("GET", e.jobs()+"?status=completed&limit=2&cursor="+cursor, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		r.json(t, &page)
		for _, j := range page.Jobs {
			require.Equal(t, "completed", j.Status)
			seen = append(seen, j.ID)
		}
		if page.Next == "" {
			require.Equal(t, 2, pages)
			break
		}
		cursor = page.Next
	}
	require.ElementsMatch(t, done, seen)

	r := e.do("GET", e.jobs()+"?status=canceled", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &page)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, canceled, page.Jobs[0].ID)
	require.Empty(t, page.Next)
}

func TestJobAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := jobtest.Seed(t, e.rdb, e.queue, jobtest.Retry, jobtest.Opts{Prefix: e.prefix, Consumer: "w-api", Reason: "try later",
		Task: pipeline.Task{Type: "echo", Payload: []byte(`{}`)}})
	var j struct {
		Attempts []struct {
			Attempt   int    `json:"attempt"`
			Worker    string `json:"worker"`
			StartedAt int64  `json:"started_at"`
			EndedAt   int64  `json:"ended_at"`
			Outcome   string `json:"outcome"`
			Error     string `json:"error"`
		} `json:"attempts"`
	}
	r := e.do("GET", e.jobs()+"/"+s.ID, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &j)
	require.Len(t, j.Attempts, 1, "%s", r.body)
	a := j.Attempts[0]
	require.Equal(t, 1, a.Attempt)
	require.Equal(t, "w-api", a.Worker)
	require.Equal(t, "retry", a.Outcome)
	require.Equal(t, "try later", a.Error)
	require.NotZero(t, a.StartedAt)
	require.GreaterOrEqual(t, a.EndedAt, a.StartedAt)

	// A job that never ran has an empty array.
	r = e.do("GET", e.jobs()+"/"+e.seed(status.Queued), "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"attempts":[]`)
}
