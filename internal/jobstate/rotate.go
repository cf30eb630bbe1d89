package jobstate

import (
	"context"
	_ "embed"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// Key rotation's store side (pipeline.Inspector.RotateKeys): reads of what is stored, in
// bounded batches, and the compare-and-set that replaces a value with its re-sealed bytes
// (reseal.lua). The keyring and the counting are pipeline's: the store sees bytes only.

var (
	//go:embed reseal.lua
	resealSrc    string
	resealScript = newScript(resealSrc)
)

// ResealPlace is where a value to re-seal is kept.
type ResealPlace int

// The places of ResealItem.
const (
	// InJob is a field of a job's hash (keys.FieldPayload or keys.FieldResult), in pieces.
	InJob ResealPlace = iota
	// InWorkflow is a task's result in its workflow's hash (keys.WorkflowTaskResult + name).
	InWorkflow
	// InEntry is the payload of a queued job's stream entry that no worker has read.
	InEntry
	// InLogs is an item of a job's logs (keys.Queue.Logs): an attempt's head and lines, whole.
	InLogs
)

// ResealItem is one stored value to replace (Store.Reseal): Old is what was read, New what
// replaces it.
type ResealItem struct {
	Place ResealPlace
	// Key is the job's hash (InJob, InEntry), the workflow's hash (InWorkflow) or the job's
	// logs list (InLogs).
	Key string
	// Name is the field (InJob, InWorkflow), the stream entry's id (InEntry) or the item's
	// index in the list (InLogs).
	Name     string
	Old, New []byte
}

// Reseal replaces each item's value with New while it still holds Old, all items of q (one
// partition) in one reseal.lua call. It answers one code per item: script.OK (replaced),
// script.Refused (the value changed or the job moved on since it was read: nothing written),
// script.WrongState (an entry a worker has read: nothing written) or script.NotFound (the hash
// is gone: nothing to re-seal).
func (s *Store) Reseal(ctx context.Context, q keys.Queue, items []ResealItem) ([]script.Code, error) {
	if len(items) == 0 {
		return nil, nil
	}
	ks := make([]string, 0, keys.MaxPriority+len(items))
	for l := keys.MinPriority; l <= keys.MaxPriority; l++ {
		ks = append(ks, q.LevelStream(l))
	}
	args := make([]any, 0, 1+4*len(items))
	args = append(args, keys.Group)
	for _, it := range items {
		mode := "H"
		switch it.Place {
		case InWorkflow:
			mode = "W"
		case InEntry:
			mode = "E"
		case InLogs:
			mode = "L"
		}
		ks = append(ks, it.Key)
		args = append(args, mode, it.Name, it.Old, it.New)
	}
	r, err := decode("rotate", resealScript.Run(ctx, s.rdb, ks, args...))
	if err == nil {
		err = r.want(len(items))
	}
	if err != nil {
		return nil, err
	}
	codes := make([]script.Code, len(items))
	for i := range codes {
		codes[i] = script.Code(r.int(i))
	}
	return codes, nil
}

// StoredJob is what a rotation reads of a job's hash: its payload and result joined from their
// pieces (nil when the hash has none), and where its payload is when not in the hash.
type StoredJob struct {
	ID              string
	Found           bool
	Status, Entry   string
	Payload, Result []byte
	// Logs are the items of the job's logs list (keys.Queue.Logs), oldest first: each an
	// attempt's "<attempt> <outcome> <ended ms> <cut>" head, a newline and its lines.
	Logs []string
}

// ReadStored reads the hashes of jobs ids of q in one pipeline.
func (s *Store) ReadStored(ctx context.Context, q keys.Queue, ids []string) ([]StoredJob, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	logs := make([]*redis.StringSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, q.Job(id))
		logs[i] = pipe.LRange(ctx, q.Logs(id), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, rediserr.Wrap("rotate", err)
	}
	out := make([]StoredJob, len(ids))
	for i, c := range cmds {
		h := c.Val()
		j := StoredJob{ID: ids[i], Found: len(h) > 0, Status: h[keys.FieldStatus], Entry: h[keys.FieldEntry]}
		j.Payload = joinField(h, keys.FieldPayload)
		j.Result = joinField(h, keys.FieldResult)
		j.Logs = logs[i].Val()
		out[i] = j
	}
	return out, nil
}

// joinField is field name of hash h whole, as record.lua's cv_read_long joins it; nil when
// the hash has no such field.
func joinField(h map[string]string, name string) []byte {
	first, ok := h[name]
	if !ok {
		return nil
	}
	if len(first) != keys.RecordPiece {
		return []byte(first)
	}
	var b strings.Builder
	b.WriteString(first)
	for k := 1; ; k++ {
		v, ok := h[name+keys.PieceSep+strconv.Itoa(k)]
		if !ok {
			break
		}
		b.WriteString(v)
	}
	return []byte(b.String())
}

// StoredEntry is a stream entry as a rotation reads it.
type StoredEntry struct {
	ID, JobID string
	Payload   []byte
}

// StreamSpan is what a rotation needs of a stream before it reads it: its last entry when the
// read starts (entries added later are new publishes, sealed under the newest key, and are not
// read: a busy stream does not keep a rotation going), and the group's last-delivered id.
type StreamSpan struct {
	Last, Delivered string
	Empty           bool
}

// ReadSpan reads stream's StreamSpan in one round trip.
func (s *Store) ReadSpan(ctx context.Context, stream string) (StreamSpan, error) {
	pipe := s.rdb.Pipeline()
	last := pipe.XRevRangeN(ctx, stream, "+", "-", 1)
	groups := pipe.XInfoGroups(ctx, stream)
	_, _ = pipe.Exec(ctx) // each command carries its own error: a missing group is no failure
	if err := last.Err(); err != nil {
		return StreamSpan{}, rediserr.Wrap("rotate", err)
	}
	if len(last.Val()) == 0 {
		return StreamSpan{Empty: true}, nil
	}
	sp := StreamSpan{Last: last.Val()[0].ID, Delivered: "0-0"}
	if gerr := groups.Err(); gerr != nil {
		if !rediserr.IsNoStream(gerr) {
			return StreamSpan{}, rediserr.Wrap("rotate", gerr)
		}
		return sp, nil
	}
	for _, g := range groups.Val() {
		if g.Name == keys.Group {
			sp.Delivered = g.LastDeliveredID
		}
	}
	return sp, nil
}

// ReadEntries reads up to n entries of stream after entry id after ("" from the start) up to
// last, in order.
func (s *Store) ReadEntries(ctx context.Context, stream, after, last string, n int) ([]StoredEntry, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := s.rdb.XRangeN(ctx, stream, start, last, int64(n)).Result()
	if err != nil {
		return nil, rediserr.Wrap("rotate", err)
	}
	out := make([]StoredEntry, len(msgs))
	for i, m := range msgs {
		id, _ := m.Values[keys.EntryUUID].(string)
		p, _ := m.Values[keys.EntryPayload].(string)
		out[i] = StoredEntry{ID: m.ID, JobID: id, Payload: []byte(p)}
	}
	return out, nil
}

// StoredTaskResult is a task's result kept in its workflow's hash.
type StoredTaskResult struct {
	Key, Field, JobID string
	Result            []byte
}

// ReadTaskResults reads the task results the workflows wfIDs of q keep, in one pipeline.
// A result whose task the workflow's document does not name is left out.
func (s *Store) ReadTaskResults(ctx context.Context, q keys.Queue, wfIDs []string) ([]StoredTaskResult, error) {
	if len(wfIDs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(wfIDs))
	for i, id := range wfIDs {
		cmds[i] = pipe.HGetAll(ctx, q.Workflow(id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, rediserr.Wrap("rotate", err)
	}
	var out []StoredTaskResult
	for i, c := range cmds {
		h := c.Val()
		var doc []DocTask
		if json.Unmarshal([]byte(h[keys.FieldWorkflowDoc]), &doc) != nil {
			continue
		}
		byName := make(map[string]string, len(doc))
		for _, t := range doc {
			byName[t.Name] = t.ID
		}
		for f, v := range h {
			name, ok := strings.CutPrefix(f, keys.WorkflowTaskResult)
			if !ok || byName[name] == "" {
				continue
			}
			out = append(out, StoredTaskResult{Key: q.Workflow(wfIDs[i]), Field: f, JobID: byName[name], Result: []byte(v)})
		}
	}
	return out, nil
}
