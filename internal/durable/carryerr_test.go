package durable

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A pipeline that failed as a whole (its connection refused) leaves its commands without an
// error; CarryErr gives them the pipeline's, and leaves alone the commands of a pipeline where
// some command answered with an error of its own.
func TestCarryErr(t *testing.T) {
	t.Parallel()
	refused := errors.New("WRONGPASS")
	mk := func(errs ...error) []redis.Cmder {
		out := make([]redis.Cmder, len(errs))
		for k, e := range errs {
			c := redis.NewCmd(context.Background(), "x")
			c.SetErr(e)
			out[k] = c
		}
		return out
	}
	for _, tc := range []struct {
		name string
		err  error
		cmds []redis.Cmder
		want []error
	}{
		{"the whole pipeline refused", refused, mk(nil, nil), []error{refused, refused}},
		{"a command failed on its own", refused, mk(nil, refused), []error{nil, refused}},
		{"no error", nil, mk(nil, nil), []error{nil, nil}},
		{"redis.Nil is an answer", redis.Nil, mk(nil, nil), []error{nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			CarryErr(tc.err, tc.cmds...)
			for k, c := range tc.cmds {
				require.Equal(t, tc.want[k], c.Err(), "command %d", k)
			}
		})
	}
}
