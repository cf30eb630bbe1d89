package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// Validate refuses what Enqueue refuses, with the same errors, and writes nothing (it has no
// Redis to write to).
func TestValidate(t *testing.T) {
	t.Parallel()
	ok := pipeline.Task{Type: "email", Payload: []byte(`{}`)}
	for _, tc := range []struct {
		name  string
		queue string
		task  pipeline.Task
		opts  []pipeline.Option
		want  error
	}{
		{"ok", "emails", ok, []pipeline.Option{pipeline.WithID("a-1"), pipeline.WithDelay(time.Second), pipeline.WithPriority(2)}, nil},
		{"queue", "bad queue", ok, nil, pipeline.ErrInvalid},
		{"type", "emails", pipeline.Task{}, nil, pipeline.ErrInvalid},
		{"id", "emails", ok, []pipeline.Option{pipeline.WithID("a b")}, pipeline.ErrInvalid},
		{"delay and run-at", "emails", ok, []pipeline.Option{pipeline.WithDelay(time.Second), pipeline.WithRunAt(time.Now())}, pipeline.ErrInvalid},
		{"task option", "emails", pipeline.Task{Type: "t", Opts: []pipeline.Option{pipeline.WithMaxRetries(-1)}}, nil, pipeline.ErrInvalid},
		{"payload", "emails", pipeline.Task{Type: "t", Payload: make([]byte, pipeline.DefaultMaxPayloadBytes+1)}, nil, pipeline.ErrPayloadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pipeline.Validate(tc.queue, tc.task, tc.opts...)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}
