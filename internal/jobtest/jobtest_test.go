package jobtest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Every status seeds, through the real scripts, to what a reader of it expects.
func TestSeedEveryStatus(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, status := range []pipeline.Status{pipeline.StatusScheduled, pipeline.StatusQueued,
		pipeline.StatusInProgress, pipeline.StatusCompleted, pipeline.StatusFailed, pipeline.StatusCanceled, jobtest.Retry} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			queue := redistest.UniqueName(t)
			s := jobtest.Seed(t, rdb, queue, status, jobtest.Opts{Result: "r"})
			want := status
			if status == jobtest.Retry {
				want = pipeline.StatusScheduled
				require.Equal(t, "seeded failure", s.LastError)
				require.Greater(t, time.Until(s.RunAt), 50*time.Minute)
			}
			require.Equal(t, want, s.Status)
			switch status {
			case pipeline.StatusInProgress:
				require.Equal(t, "jobtest", s.Worker)
				require.Equal(t, s.Entry, s.Job.Entry)
				require.Equal(t, 1, s.Attempt)
			case pipeline.StatusCompleted:
				require.Equal(t, "r", string(s.Result))
				require.Empty(t, s.Job.Entry)
			case pipeline.StatusFailed:
				require.False(t, s.CompletedAt.IsZero())
			}
		})
	}
}
