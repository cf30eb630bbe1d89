package jobstate_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestCompletedRecordInPieces: a completed job keeps a payload, metadata and result longer
// than keys.RecordPiece in pieces, so that its hash stays one listpack (Redis's
// hash-max-listpack-value). Get reads them back whole, whichever path wrote them (the payload
// sent by the worker, or read from the entry), and a publish of the same id and payload is the
// same job again, not a conflict.
func TestCompletedRecordInPieces(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	cfg := jobstate.FinishConfig{Worker: "w1", Retention: time.Hour, MinRetention: time.Minute}
	long := func(n int) string { return strings.Repeat("0123456789", n/10+1)[:n] }
	piece, most := keys.RecordPiece, keys.RecordPiece*keys.RecordMaxPieces
	cases := []struct {
		name             string
		payload, result  int
		sent, meta       bool
		listpack         bool // the hash's encoding after completion
		payloadEncodedAs int  // pieces of the payload in the hash: 1 whole
	}{
		{"short", 20, 0, true, false, true, 1},
		{"exactly a piece", piece, piece, true, false, true, 1},
		{"a byte over", piece + 1, 0, true, false, true, 2},
		{"100 bytes", 100, 0, true, false, true, 2},
		{"long result", 10, 300, true, false, true, 1},
		{"from the entry", 1000, 70, false, true, true, 16},
		{"the most in pieces", most, 0, false, false, true, keys.RecordMaxPieces},
		{"past the most", most + 1, 0, true, false, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			queue := redistest.UniqueName(t)
			q := keys.New(keys.DefaultPrefix, queue)
			task := pipeline.Task{Type: "t", Payload: []byte(long(tc.payload))}
			if tc.meta {
				task.Metadata = map[string]string{"trace": long(200)}
			}
			job, err := c.Enqueue(ctx, queue, task, pipeline.WithID("job-"+strconv.Itoa(tc.payload)))
			require.NoError(t, err)
			require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
			_, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
				Streams: []string{q.Stream(), ">"}, Count: 1}).Result()
			require.NoError(t, err)
			now := time.Now()
			done := jobstate.Done(&q, jobstate.DoneParams{Ran: jobstate.Ran{ID: job.ID, Entry: job.Entry, Attempt: 1,
				Started: now, Finished: now}, Result: long(tc.result)})
			if tc.sent {
				done = done.WithPayload(long(tc.payload))
			}
			call := jobstate.FinishCall(cfg, []jobstate.Transition{done})
			require.Equal(t, []script.Code{applied}, finishCodes(t, 1, call.Script.Run(ctx, rdb, call.Keys, call.Args...)))

			got, err := c.Get(ctx, queue, job.ID)
			require.NoError(t, err)
			require.Equal(t, status.Completed, got.Status)
			require.Equal(t, long(tc.payload), string(got.Payload))
			if tc.result > 0 {
				require.Equal(t, long(tc.result), string(got.Result))
			}
			if tc.meta {
				require.Equal(t, long(200), got.Metadata["trace"])
			}
			enc, err := rdb.ObjectEncoding(ctx, q.Job(job.ID)).Result()
			require.NoError(t, err)
			require.Equal(t, tc.listpack, enc == "listpack", "encoding %s", enc)
			fields, err := rdb.HKeys(ctx, q.Job(job.ID)).Result()
			require.NoError(t, err)
			n := 0
			for _, f := range fields {
				if f == keys.FieldPayload || strings.HasPrefix(f, keys.FieldPayload+keys.PieceSep) {
					n++
				}
			}
			require.Equal(t, tc.payloadEncodedAs, n, "%v", fields)

			again, err := c.Enqueue(ctx, queue, task, pipeline.WithID(job.ID))
			require.NoError(t, err, "the same publish again")
			require.True(t, again.Duplicate)
			task.Payload = append(task.Payload, 'x')
			_, err = c.Enqueue(ctx, queue, task, pipeline.WithID(job.ID))
			require.ErrorIs(t, err, pipeline.ErrConflict, "another payload under its id")
			sizes, err := jobstate.NewStore(rdb, keys.DefaultPrefix).RecordSizes(ctx, q, []string{job.ID})
			require.NoError(t, err)
			require.GreaterOrEqual(t, sizes[0], int64(tc.payload+tc.result), "a record's size is a bound")
		})
	}
}

// TestPieceSizeInLua: record.lua spells keys.RecordPiece and keys.RecordMaxPieces out (a
// script gets the library's functions, not Go's constants).
func TestPieceSizeInLua(t *testing.T) {
	src, err := os.ReadFile("lua/record.lua")
	require.NoError(t, err)
	m := regexp.MustCompile(`local CV_PIECE, CV_MAX_PIECES = (\d+), (\d+)`).FindSubmatch(src)
	require.NotNil(t, m)
	require.Equal(t, strconv.Itoa(keys.RecordPiece), string(m[1]))
	require.Equal(t, strconv.Itoa(keys.RecordMaxPieces), string(m[2]))
	require.Contains(t, string(src), "#first ~= "+strconv.Itoa(keys.RecordPiece))
}
