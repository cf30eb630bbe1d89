package jobstate

import (
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// Debounced is what debounce.lua did with one publish. It created job ID, or it joined the
// pending job ID of its debounce key (Joined). That job is due at RunAt. It was created at
// CreatedAt, by the window's first publish, and has taken Publishes publishes. Version is its
// version now. All times are Redis's.
type Debounced struct {
	ID        string
	Joined    bool
	RunAt     time.Time
	CreatedAt time.Time
	Until     time.Time // the window's first publish + its max wait
	Version   int64
	Publishes int
}

// debounceCall is one debounce.lua call publishing j in q; j has a debounce key
// (NewJob.Debounce). The call joins the key's pending job, or creates j, scheduled (see the
// script). j's RunAt, UniqueKey and ChosenID are not used. The script takes due times from
// Redis's clock, and the caller refuses a unique key or a chosen id with a debounce key.
func debounceCall(q keys.Queue, j *NewJob) script.Call {
	ret := ""
	if j.KeepOwn {
		ret = strconv.FormatInt(retentionMS(j.Retention), 10)
	}
	return script.Call{Script: debounceScript,
		Keys: []string{q.Scheduled(), q.Stats(), q.Job(j.ID), q.Debounce(j.Debounce), q.Closed(), q.Levels()},
		Args: []any{j.ID, j.Type, j.Payload, j.Metadata, j.MaxRetries, retentionMS(j.Timeout), ret,
			max(1, ceilMS(j.DebounceQuiet)), max(1, ceilMS(j.DebounceMaxWait)), q.JobPrefix(), q.Wake(), j.LimitKey, priorityArg(j.Priority)}}
}

// ceilMS is d in whole milliseconds, rounded up: a window is never shorter than asked.
func ceilMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// debounceReply reads the reply of a debounceCall; ErrClosed when the queue or partition is
// closed (nothing written).
func debounceReply(cmd *redis.Cmd) (Debounced, error) {
	r, err := decode("debounce", cmd)
	if err == nil && r.code == script.WrongState {
		return Debounced{}, ErrClosed
	}
	if err == nil {
		err = r.want(7)
	}
	if err != nil {
		return Debounced{}, err
	}
	d := Debounced{ID: r.str(0), RunAt: time.UnixMilli(r.int(1)), Joined: r.int(2) == 1,
		CreatedAt: time.UnixMilli(r.int(3)), Version: r.int(4), Publishes: int(r.int(5)),
		Until: time.UnixMilli(r.int(6))}
	if d.ID == "" {
		return Debounced{}, errors.New("debounce: reply without a job id")
	}
	return d, nil
}
