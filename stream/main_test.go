package stream

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/leaktest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// redistest.Main ends in os.Exit, so leaktest.Main cannot wrap it; each top-level test checks
// for leaks in its Cleanup instead (see checkLeaks). Top-level tests here are not parallel, so
// when one's Cleanup runs no other test's goroutines are alive.
func TestMain(m *testing.M) { redistest.Main(m) }

// checkLeaks fails t if goroutines started during t (and its subtests) outlive it. Call it
// first thing in a top-level, non-parallel test, so its Cleanup runs after every other one.
// leaktest waits for goroutines that end on their own: the stock watermill-redisstream reader
// sleeps 500ms after its client closes before it notices Close.
func checkLeaks(t *testing.T, opts ...leaktest.Option) {
	t.Helper()
	opts = append(opts,
		leaktest.IgnoreCurrent(),
		// redistest's process spawner and the shared server's reaper live as long as the binary.
		leaktest.IgnoreFunction("github.com/conveyorq/conveyor/internal/redistest.(*Server).launch.func1"),
		leaktest.IgnoreFunction("github.com/conveyorq/conveyor/internal/redisproc.StartCmd.func1.1"),
	)
	t.Cleanup(func() { leaktest.Verify(t, opts...) })
}
