package stream

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// redistest.Main ends in os.Exit, so goleak.VerifyTestMain cannot wrap it; each top-level
// test checks for leaks in its Cleanup instead (see checkLeaks). Top-level tests here are not
// parallel, so when one's Cleanup runs no other test's goroutines are alive.
func TestMain(m *testing.M) { redistest.Main(m) }

// checkLeaks fails t if goroutines started during t (and its subtests) outlive it. Call it
// first thing in a top-level, non-parallel test, so its Cleanup runs after every other one.
func checkLeaks(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	opts = append(opts,
		goleak.IgnoreCurrent(),
		// redistest's process spawner and the shared server's reaper live as long as the binary.
		goleak.IgnoreAnyFunction("github.com/conveyorq/conveyor/internal/redistest.(*Server).launch.func1"),
		goleak.IgnoreAnyFunction("github.com/conveyorq/conveyor/internal/redisproc.StartCmd.func1.1"),
	)
	t.Cleanup(func() {
		// goleak retries for about half a second; goroutines that end on their own may take
		// longer (the stock watermill-redisstream reader sleeps 500ms after its client closes
		// before it notices Close).
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err = goleak.Find(opts...); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Error(err)
		}
	})
}
