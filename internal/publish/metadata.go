package publish

import "github.com/conveyorq/conveyor/internal/tracing"

// Metadata is the metadata a new job carries: the task's own (md), then its options' (own),
// then the publish's trace context (tc), each over the one before. It returns md itself when
// there is nothing to add, so a publish without either allocates no map.
func Metadata(md, own, tc map[string]string) map[string]string {
	if len(own) == 0 && tc == nil {
		return md
	}
	merged := make(map[string]string, len(md)+len(own)+len(tc))
	for k, v := range md {
		merged[k] = v
	}
	for k, v := range own {
		merged[k] = v
	}
	if tc != nil {
		// The publish span's trace context replaces one the task carried (a batch's span
		// links to it; a single task's was the span's parent).
		delete(merged, tracing.KeyTracestate)
		for k, v := range tc {
			merged[k] = v
		}
	}
	return merged
}
