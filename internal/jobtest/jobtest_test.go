package jobtest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Every status seeds, through the real scripts, to what a reader of it expects.
func TestSeedEveryStatus(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, st := range append(status.All(), jobtest.Retry) {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			queue := redistest.UniqueName(t)
			s := jobtest.Seed(t, rdb, queue, st, jobtest.Opts{Result: "r"})
			want := st
			if st == jobtest.Retry {
				want = status.Scheduled
				require.Equal(t, "seeded failure", s.LastError)
				require.Greater(t, time.Until(s.RunAt), 50*time.Minute)
			}
			require.Equal(t, want, s.Status)
			switch st {
			case status.InProgress:
				require.Equal(t, "jobtest", s.Worker)
				require.Equal(t, s.Entry, s.Job.Entry)
				require.Equal(t, 1, s.Attempt)
			case status.Completed:
				require.Equal(t, "r", string(s.Result))
				require.Empty(t, s.Job.Entry)
			case status.Failed:
				require.False(t, s.CompletedAt.IsZero())
			case status.Waiting:
				require.NotEmpty(t, s.Workflow)
				require.Equal(t, "2", s.Task)
				require.Empty(t, s.Job.Entry)
			}
		})
	}
}
