package status_test

import (
	"slices"
	"testing"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

func TestFinalIsTheEndStates(t *testing.T) {
	t.Parallel()
	final := map[status.Status]bool{status.Completed: true, status.Failed: true, status.Canceled: true,
		status.Waiting: false, status.Scheduled: false, status.Queued: false, status.InProgress: false}
	seen := map[status.Status]bool{}
	for _, in := range status.Infos() {
		s := in.Status
		if seen[s] {
			t.Errorf("All lists %q twice", s)
		}
		seen[s] = true
		// A status this test does not name (a new one) is final as the list says.
		want, named := final[s]
		if !named {
			want = in.Final
		}
		if s.Final() != want {
			t.Errorf("%q.Final() = %v", s, s.Final())
		}
	}
	for s := range final {
		if !seen[s] {
			t.Errorf("All lacks %q", s)
		}
	}
}

// Every status says how it looks and reads; the listable ones come gauged first, each group in
// the order of a job's life.
func TestListIsWhole(t *testing.T) {
	t.Parallel()
	for _, in := range status.Infos() {
		if in.Tone == "" || in.Help == "" {
			t.Errorf("%q has no tone or help", in.Status)
		}
		if in.Gauge && !in.Listable {
			t.Errorf("%q is gauged but not listable", in.Status)
		}
		if !in.Status.Known() || in.Status.Listable() != in.Listable {
			t.Errorf("%q: Known or Listable disagrees with the list", in.Status)
		}
	}
	want := []status.Status{status.Waiting, status.Scheduled, status.Queued, status.InProgress, status.Failed,
		status.Completed, status.Canceled}
	if got := status.Listable(); !slices.Equal(got, want) {
		t.Errorf("Listable() = %v, want %v", got, want)
	}
	if status.Failed.Word() != "dead" || status.Queued.Word() != "queued" {
		t.Errorf("Word: %q, %q", status.Failed.Word(), status.Queued.Word())
	}
	if status.Status("nosuch").Known() {
		t.Error("an unknown status is Known")
	}
}

// A person's "dead" is Failed, both ways; any other text is taken as it is, for Inspector.List
// to refuse.
func TestParseReadsDead(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]status.Status{"dead": status.Failed, "failed": status.Failed,
		"queued": status.Queued, "nosuch": "nosuch"} {
		if got := status.Parse(in); got != want {
			t.Errorf("Parse(%q) = %q, want %q", in, got, want)
		}
	}
	for _, s := range status.All() {
		if got := status.Parse(s.Word()); got != s {
			t.Errorf("Parse(%q.Word()) = %q", s, got)
		}
	}
	if status.AttemptWord(status.AttemptFailed) != status.Dead || status.AttemptWord(status.AttemptLost) != "lost" {
		t.Errorf("AttemptWord: %q, %q", status.AttemptWord(status.AttemptFailed), status.AttemptWord(status.AttemptLost))
	}
}

// The outcomes the store's scripts write into the attempt history are internal/keys' words.
// JSON and the CLI show them as they are, so they must not drift.
func TestAttemptOutcomesAreTheStores(t *testing.T) {
	t.Parallel()
	for got, want := range map[string]string{status.AttemptRetried: keys.AttemptRetry,
		status.AttemptSnoozed: keys.AttemptSnooze, status.AttemptLost: keys.AttemptLost,
		status.AttemptFailed: keys.AttemptFailed, status.AttemptReplayed: keys.AttemptReplay} {
		if got != want {
			t.Errorf("status has %q where internal/keys has %q", got, want)
		}
	}
	// The outcomes read from the job itself are its statuses' names, as JSON has them.
	if status.AttemptCompleted != string(status.Completed) || status.AttemptCanceled != string(status.Canceled) {
		t.Error("AttemptCompleted or AttemptCanceled is not its status's name")
	}
}
