package jobstate

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// The administration scripts: what pipeline.Inspector runs besides the transitions above.

var (
	//go:embed zpage.lua
	zpageSrc string
	//go:embed purge_ids.lua
	purgeIDsSrc string
	//go:embed entry_jobs.lua
	entryJobsSrc string

	zpageScript     = newScript(zpageSrc)
	purgeIDsScript  = newScript(purgeIDsSrc)
	entryJobsScript = newScript(entryJobsSrc)
)

// SetItem is a member of a sorted set and its score.
type SetItem struct {
	Member string
	Score  int64
}

// SetPage reads up to n members of the sorted set key that come after the cursor (zpage.lua),
// lowest score first, or highest first when desc; a nil after starts at the beginning. Members
// of equal score are in Redis's order (by bytes; reversed when desc), and the cursor need not
// be in the set any more.
func (s *Store) SetPage(ctx context.Context, key string, desc bool, after *SetItem, n int) ([]SetItem, error) {
	dir, score, member := "ASC", "", ""
	if desc {
		dir = "DESC"
	}
	if after != nil {
		score, member = strconv.FormatInt(after.Score, 10), after.Member
	}
	r, err := decode("list", zpageScript.Run(ctx, s.rdb, []string{key}, dir, score, member, n))
	if err == nil && (r.code != script.OK || len(r.rest)%2 != 0) {
		err = r.unexpected()
	}
	if err != nil {
		return nil, err
	}
	items := make([]SetItem, len(r.rest)/2)
	for i := range items {
		m, s := r.str(2*i), r.str(2*i+1)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("zpage: score %q of %q: %w", s, m, err)
		}
		items[i] = SetItem{Member: m, Score: int64(f)}
	}
	return items, nil
}

// purgeIDsCall is one purge_ids.lua call deleting the dead jobs ids of q (see purgeIDsReply).
func purgeIDsCall(q keys.Queue, ids []string) script.Call {
	ks := make([]string, 0, 1+len(ids))
	ks = append(ks, q.Dead())
	args := make([]any, len(ids))
	for i, id := range ids {
		ks = append(ks, q.Job(id))
		args[i] = id
	}
	return script.Call{Script: purgeIDsScript, Keys: ks, Args: args}
}

// purgeIDsReply reads the reply of a purgeIDsCall of n ids: per id script.OK (deleted),
// script.WrongState with the status of a job that is not dead (left alone) or script.NotFound.
func purgeIDsReply(cmd *redis.Cmd, n int) ([]Row, error) {
	r, err := decode("purge", cmd)
	if err == nil {
		err = r.want(2 * n)
	}
	if err != nil {
		return nil, err
	}
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{Code: script.Code(r.int(2 * i)), Data: r.str(2*i + 1)}
	}
	return rows, nil
}

// EntryJob is the job a stream entry carries (entry_jobs.lua).
type EntryJob struct {
	// ID is the job's id; empty when the entry carries no live job (it is gone, unreadable, or
	// its job moved on to another entry or ended).
	ID string
	// Attempt is the attempt the entry starts (1-based).
	Attempt int
	// Flat is the job's hash as a field/value list, with payload and metadata from the entry.
	Flat []string
}

// EntryJobs reads the jobs that the stream entries of q carry, one per entry in order.
func (s *Store) EntryJobs(ctx context.Context, q keys.Queue, entries []string) ([]EntryJob, error) {
	args := make([]any, 0, 1+len(entries))
	args = append(args, q.JobPrefix())
	for _, e := range entries {
		args = append(args, e)
	}
	r, err := decode("list", entryJobsScript.Run(ctx, s.rdb, []string{q.Stream()}, args...))
	if err == nil {
		err = r.want(len(entries))
	}
	if err != nil {
		return nil, err
	}
	out := make([]EntryJob, len(entries))
	for i, v := range r.rest {
		row, _ := v.([]any)
		if len(row) != 3 {
			continue
		}
		out[i].ID, _ = row[0].(string)
		a, _ := row[1].(int64)
		out[i].Attempt = int(a)
		flat, _ := row[2].([]any)
		out[i].Flat = make([]string, len(flat))
		for k, v := range flat {
			out[i].Flat[k], _ = v.(string)
		}
	}
	return out, nil
}
