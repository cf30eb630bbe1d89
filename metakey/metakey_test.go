package metakey_test

import (
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/metakey"
)

// The keys are a wire format: messages published before a release must read the same after.
func TestValues(t *testing.T) {
	t.Parallel()
	for got, want := range map[string]string{
		metakey.Prefix: "conveyor_", metakey.Type: "conveyor_type", metakey.Delay: "conveyor_delay",
		metakey.RunAt: "conveyor_run_at", metakey.MaxRetries: "conveyor_max_retries",
		metakey.Timeout: "conveyor_timeout", metakey.UniqueKey: "conveyor_unique_key",
		metakey.UniqueTTL: "conveyor_unique_ttl", metakey.Priority: "conveyor_priority",
		metakey.Group: "conveyor_group", metakey.LimitKey: "conveyor_limit_key",
		metakey.Retention: "conveyor_retention", metakey.DebounceKey: "conveyor_debounce_key",
		metakey.DebounceQuiet: "conveyor_debounce_quiet", metakey.DebounceMaxWait: "conveyor_debounce_max_wait",
		metakey.Schedule: "schedule", metakey.ScheduleTick: "schedule_tick",
		metakey.ScheduleMissed: "schedule_missed", metakey.EntryType: "_conveyor_type",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	// A job's own metadata may carry the schedule keys but never EntryType.
	if strings.HasPrefix(metakey.Schedule, metakey.Prefix) || metakey.EntryType[0] != '_' {
		t.Error("schedule keys are plain metadata; EntryType is reserved")
	}
}
