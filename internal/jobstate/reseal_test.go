package jobstate_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// topologies are the servers a store test runs on: a private standalone server, and a cluster.
var topologies = []struct {
	name string
	rdb  func(t *testing.T) redis.UniversalClient
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
}

// TestResealCompareAndSet: reseal.lua replaces a job's field only while it still holds the
// bytes read, writes the new value in the record's pieces and deletes the pieces it no longer
// needs; and replaces a queued job's stream entry only while no worker has read it, keeping
// the entry's fields and their order.
func TestResealCompareAndSet(t *testing.T) {
	t.Parallel()
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			ctx := t.Context()
			s := jobstate.NewStore(rdb, keys.DefaultPrefix)
			q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
			long := strings.Repeat("a", 5*keys.RecordPiece+10) // 6 pieces
			short := strings.Repeat("b", keys.RecordPiece+1)   // 2 pieces

			// A completed job's payload in pieces, as cv_put_long writes it.
			jk := q.Job("j1")
			f := []any{keys.FieldStatus, "completed"}
			for k := 0; k*keys.RecordPiece < len(long); k++ {
				name := keys.FieldPayload
				if k > 0 {
					name += keys.PieceSep + string(rune('0'+k))
				}
				f = append(f, name, long[k*keys.RecordPiece:min(len(long), (k+1)*keys.RecordPiece)])
			}
			require.NoError(t, rdb.HSet(ctx, jk, f...).Err())

			// Another value than the one read: nothing written.
			codes, err := s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InJob, Key: jk, Name: keys.FieldPayload,
				Old: []byte("not what is stored"), New: []byte(short)}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.Refused}, codes)
			got, err := s.ReadStored(ctx, q, []string{"j1"})
			require.NoError(t, err)
			require.Equal(t, long, string(got[0].Payload))

			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InJob, Key: jk, Name: keys.FieldPayload,
				Old: []byte(long), New: []byte(short)}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.OK}, codes)
			h, err := rdb.HGetAll(ctx, jk).Result()
			require.NoError(t, err)
			require.Equal(t, map[string]string{keys.FieldStatus: "completed", keys.FieldPayload: short[:keys.RecordPiece],
				keys.FieldPayload + "+1": short[keys.RecordPiece:]}, h, "the stale pieces are deleted")

			// A scheduled job's payload is whole, as the scripts that move it on read it.
			require.NoError(t, rdb.HSet(ctx, q.Job("s1"), keys.FieldStatus, "scheduled", keys.FieldPayload, short).Err())
			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InJob, Key: q.Job("s1"), Name: keys.FieldPayload,
				Old: []byte(short), New: []byte(long)}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.OK}, codes)
			require.Equal(t, map[string]string{keys.FieldStatus: "scheduled", keys.FieldPayload: long}, rdb.HGetAll(ctx, q.Job("s1")).Val())

			// A queued job's entry, read by no worker: replaced at the back, fields kept in order.
			stream := q.Stream()
			require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, keys.Group, "$").Err())
			add := func(id, payload string) string {
				e, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{keys.EntryUUID, id, keys.EntryPayload, payload,
					keys.EntryMetadata, "", keys.EntryJob, keys.FormatEntryJob(1, 0, 0, "t"), keys.EntryLimitKey, "lk"}}).Result()
				require.NoError(t, err)
				require.NoError(t, rdb.HSet(ctx, q.Job(id), keys.FieldStatus, "queued", keys.FieldEntry, e).Err())
				return e
			}
			e2 := add("j2", "old2")
			e3 := add("j3", "old3")
			// j2 is read by a worker: left alone.
			_, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w", Streams: []string{stream, ">"}, Count: 1}).Result()
			require.NoError(t, err)
			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{
				{Place: jobstate.InEntry, Key: q.Job("j2"), Name: e2, Old: []byte("old2"), New: []byte("new2")},
				{Place: jobstate.InEntry, Key: q.Job("j3"), Name: e3, Old: []byte("changed"), New: []byte("new3")},
			})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.WrongState, script.Refused}, codes)
			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InEntry, Key: q.Job("j3"), Name: e3, Old: []byte("old3"), New: []byte("new3")}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.OK}, codes)
			msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
			require.NoError(t, err)
			require.Len(t, msgs, 2)
			require.Equal(t, e2, msgs[0].ID)
			require.NotEqual(t, e3, msgs[1].ID, "the old entry is deleted")
			require.Equal(t, map[string]any{keys.EntryUUID: "j3", keys.EntryPayload: "new3", keys.EntryMetadata: "",
				keys.EntryJob: keys.FormatEntryJob(1, 0, 0, "t"), keys.EntryLimitKey: "lk"}, msgs[1].Values)
			require.Equal(t, msgs[1].ID, rdb.HGet(ctx, q.Job("j3"), keys.FieldEntry).Val())
			// The old entry id again: the job moved on.
			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InEntry, Key: q.Job("j3"), Name: e3, Old: []byte("old3"), New: []byte("x")}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.Refused}, codes)

			// A job gone since the read.
			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InJob, Key: q.Job("gone"), Name: keys.FieldPayload, Old: []byte("x"), New: []byte("y")}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.NotFound}, codes)
			require.Zero(t, rdb.Exists(ctx, q.Job("gone")).Val())

			// A workflow's task result, kept whole.
			wk := q.Workflow("w1")
			require.NoError(t, rdb.HSet(ctx, wk, keys.WorkflowTaskResult+"a", long).Err())
			codes, err = s.Reseal(ctx, q, []jobstate.ResealItem{{Place: jobstate.InWorkflow, Key: wk, Name: keys.WorkflowTaskResult + "a", Old: []byte(long), New: []byte(long + "x")}})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.OK}, codes)
			require.Equal(t, long+"x", rdb.HGet(ctx, wk, keys.WorkflowTaskResult+"a").Val())
		})
	}
}

// TestResealLogs: reseal.lua replaces an item of a job's logs only while the item at that index
// is still the one read (a running attempt's item is replaced whole by its next write; a list
// past 20 items loses its first), and ReadStored reads the items with the hash.
func TestResealLogs(t *testing.T) {
	t.Parallel()
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			ctx := t.Context()
			s := jobstate.NewStore(rdb, keys.DefaultPrefix)
			q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
			require.NoError(t, rdb.HSet(ctx, q.Job("j1"), keys.FieldStatus, "completed").Err())
			lk := q.Logs("j1")
			require.NoError(t, rdb.RPush(ctx, lk, "1 retry 100 0\na", "2 running 200 0\nb").Err())
			got, err := s.ReadStored(ctx, q, []string{"j1"})
			require.NoError(t, err)
			require.Equal(t, []string{"1 retry 100 0\na", "2 running 200 0\nb"}, got[0].Logs)

			codes, err := s.Reseal(ctx, q, []jobstate.ResealItem{
				{Place: jobstate.InLogs, Key: lk, Name: "0", Old: []byte("1 retry 100 0\na"), New: []byte("1 retry 100 0\nA")},
				{Place: jobstate.InLogs, Key: lk, Name: "1", Old: []byte("2 running 200 0\nstale"), New: []byte("2 running 200 0\nB")},
				{Place: jobstate.InLogs, Key: lk, Name: "5", Old: []byte("x"), New: []byte("y")},
				{Place: jobstate.InLogs, Key: q.Logs("gone"), Name: "0", Old: []byte("x"), New: []byte("y")},
			})
			require.NoError(t, err)
			require.Equal(t, []script.Code{script.OK, script.Refused, script.Refused, script.NotFound}, codes)
			require.Equal(t, []string{"1 retry 100 0\nA", "2 running 200 0\nb"}, rdb.LRange(ctx, lk, 0, -1).Val())
		})
	}
}
