package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/status"
)

// GET /v1/jobs?status= pages through a status across every known queue, in the per-queue
// list's JSON, each job naming its queue; a page's next goes on where it ended. (Before, there
// was no such route: the dead jobs of a queue one did not name were seen nowhere.)
func TestListAllJobs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	want := map[string]bool{}
	for _, q := range []string{"billing", "emails"} {
		for range 2 {
			j := jobtest.Seed(t, e.rdb, q, status.Failed, jobtest.Opts{Prefix: e.prefix})
			want[q+"/"+j.ID] = true
		}
	}
	e.seed(status.Queued)
	got := map[string]bool{}
	var queues []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		r := e.do("GET", "/v1/jobs?status=dead&limit=1&cursor="+url.QueryEscape(cursor), "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var p struct {
			Jobs []struct{ ID, Queue, Status string }
			Next *string
		}
		r.json(t, &p)
		require.NotNil(t, p.Next, "next is always there: %s", r.body)
		require.LessOrEqual(t, len(p.Jobs), 1)
		for _, j := range p.Jobs {
			require.Equal(t, "failed", j.Status)
			require.False(t, got[j.Queue+"/"+j.ID], "listed twice")
			got[j.Queue+"/"+j.ID] = true
			queues = append(queues, j.Queue)
		}
		if *p.Next == "" {
			break
		}
		cursor = *p.Next
	}
	require.Equal(t, want, got)
	require.Equal(t, []string{"billing", "billing", "emails", "emails"}, queues)

	r := e.do("GET", "/v1/jobs?status=queued", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"queue":"`+e.queue+`"`)

	for _, bad := range []string{"", "status=lost", "status=queued&limit=0", "status=queued&limit=1001",
		"status=queued&cursor=nonsense"} {
		r := e.do("GET", "/v1/jobs?"+bad, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", bad, r.body)
	}
}
