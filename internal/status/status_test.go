package status_test

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/status"
)

func TestFinalIsTheEndStates(t *testing.T) {
	t.Parallel()
	final := map[status.Status]bool{status.Completed: true, status.Failed: true, status.Canceled: true}
	seen := map[status.Status]bool{}
	for _, s := range status.All() {
		if seen[s] {
			t.Errorf("All lists %q twice", s)
		}
		seen[s] = true
		if s.Final() != final[s] {
			t.Errorf("%q.Final() = %v", s, s.Final())
		}
	}
}
