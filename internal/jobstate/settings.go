package jobstate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// A queue's settings record is one hash, SettingsKey, of fields a control owns: "paused", a
// per-queue default, and "rev", raised by every change. Every record sits in one hash slot, so
// a worker reads those of all its queues in one round trip, on a cluster too. Each change
// publishes one notice on SettingsChannel, which is how workers learn of it at once.
//
// The limits, the group settings and the partition count stay where the job scripts read them,
// atomically with a job's move (see docs/ARCHITECTURE.md, "Queue settings"). Their writers
// raise the record's rev (BumpSettings), so the one notice and the one poll cover them too.

// Settings fields with a meaning to the store; the others are the callers' controls.
const (
	SettingRev    = "rev"
	SettingPaused = "paused"
)

// settingsBase is the common hash tag of every queue's record.
func settingsBase(prefix string) string { return prefix + ":{:settings}:" }

// SettingsKey is queue's settings record.
func SettingsKey(prefix, queue string) string { return settingsBase(prefix) + "q:" + queue }

// SettingsChannel is the channel of the notices of settings changes (SettingsNotice).
func SettingsChannel(prefix string) string { return settingsBase(prefix) + "notices" }

// Settings is a queue's settings record as read.
type Settings struct {
	Queue string
	// Rev is the record's revision; 0 when there is no record yet.
	Rev int64
	// Paused says whether the queue is paused: the record's field, or, for a queue without a
	// record, its membership of the legacy set keys.Paused.
	Paused bool
	// Fields holds the record's other fields, by name.
	Fields map[string]string
}

// SettingsChange is a change of a queue's record (Store.UpdateSettings).
type SettingsChange struct {
	// Paused pauses (true) or resumes (false) the queue; nil leaves it.
	Paused *bool
	// Token names a pause whose workers are to confirm it (the notice carries it).
	Token string
	// Set writes fields; Delete removes them. Neither may name SettingRev or SettingPaused.
	Set    map[string]string
	Delete []string
}

// SettingsChanged is what UpdateSettings did: the new revision and whether the queue was
// paused before the change.
type SettingsChanged struct {
	Rev       int64
	WasPaused bool
}

//go:embed settings.lua
var settingsSrc string

var settingsScript = script.New(settingsSrc)

// UpdateSettings applies c to queue's record and publishes the notice, in one script.
//
// A queue without a record starts from the legacy set keys.Paused, so a pause set by an older
// version survives the first change. The set stays the index of the paused queues that
// listings read (PausedQueues), kept after the script: on a cluster it lives in another slot.
func (s *Store) UpdateSettings(ctx context.Context, queue string, c SettingsChange) (SettingsChanged, error) {
	var out SettingsChanged
	for f := range c.Set {
		if f == SettingRev || f == SettingPaused {
			return out, fmt.Errorf("settings field %q is the store's own", f)
		}
	}
	legacy, err := s.rdb.SIsMember(ctx, keys.Paused(s.prefix), queue).Result()
	if err != nil {
		return out, rediserr.Wrap("queue settings", err)
	}
	paused := ""
	if c.Paused != nil {
		paused = boolField(*c.Paused)
	}
	args := []any{SettingsChannel(s.prefix), queue, c.Token, boolField(legacy), paused, SettingPaused, SettingRev, len(c.Set)}
	for _, f := range slices.Sorted(maps.Keys(c.Set)) {
		args = append(args, f, c.Set[f])
	}
	for _, f := range c.Delete {
		args = append(args, f)
	}
	vals, err := settingsScript.Run(ctx, s.rdb, []string{SettingsKey(s.prefix, queue)}, args...).Int64Slice()
	if err != nil {
		return out, rediserr.Wrap("queue settings", err)
	}
	if len(vals) != 3 {
		return out, fmt.Errorf("queue settings: the script answered %v", vals)
	}
	out = SettingsChanged{Rev: vals[0], WasPaused: vals[1] == 1}
	switch {
	case c.Paused != nil && *c.Paused:
		err = s.rdb.SAdd(ctx, keys.Paused(s.prefix), queue).Err()
	case c.Paused != nil || (vals[2] == 1 && legacy != out.WasPaused):
		err = s.rdb.SRem(ctx, keys.Paused(s.prefix), queue).Err()
	}
	return out, rediserr.Wrap("paused queues", err)
}

// BumpSettings raises queue's revision and publishes the notice, for a change of a setting
// kept outside the record (limits, group settings, the partition count).
func (s *Store) BumpSettings(ctx context.Context, queue string) error {
	_, err := s.UpdateSettings(ctx, queue, SettingsChange{})
	return err
}

// ReadSettings reads the records of queues, in one round trip (two nodes on a cluster: the
// records' and the legacy set's).
func (s *Store) ReadSettings(ctx context.Context, queues []string) ([]Settings, error) {
	cmds := make([]*redis.MapStringStringCmd, len(queues))
	var legacy *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range queues {
			cmds[k] = p.HGetAll(ctx, SettingsKey(s.prefix, q))
		}
		legacy = p.SMembers(ctx, keys.Paused(s.prefix))
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("queue settings", err)
	}
	paused := pausedSet(legacy.Val())
	out := make([]Settings, len(queues))
	for k, q := range queues {
		out[k], err = parseSettings(q, cmds[k].Val(), paused[q])
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseSettings reads the record m of queue; legacy is the queue's membership of keys.Paused,
// which counts when there is no record.
func parseSettings(queue string, m map[string]string, legacy bool) (Settings, error) {
	st := Settings{Queue: queue, Paused: legacy, Fields: map[string]string{}}
	if len(m) == 0 {
		return st, nil
	}
	rev, err := strconv.ParseInt(m[SettingRev], 10, 64)
	if err != nil || rev < 1 {
		return st, fmt.Errorf("queue %s: settings revision %q in Redis is not a positive number", queue, m[SettingRev])
	}
	st.Rev, st.Paused = rev, m[SettingPaused] == "1"
	for f, v := range m {
		if f != SettingRev && f != SettingPaused {
			st.Fields[f] = v
		}
	}
	return st, nil
}

// SubscribeSettings subscribes to the notices of settings changes and waits for the
// subscription to be confirmed, so that no change made after it returns goes unheard.
func (s *Store) SubscribeSettings(ctx context.Context) (*redis.PubSub, error) {
	ps := s.rdb.Subscribe(ctx, SettingsChannel(s.prefix))
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, rediserr.Wrap("settings notices", err)
	}
	return ps, nil
}

// SubscribePauseAcks subscribes to the notices of pause confirmations (keys.PauseAckChannel)
// and waits for the subscription to be confirmed, so that no confirmation made after it
// returns goes unheard.
func (s *Store) SubscribePauseAcks(ctx context.Context) (*redis.PubSub, error) {
	ps := s.rdb.Subscribe(ctx, keys.PauseAckChannel(s.prefix))
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, rediserr.Wrap("pause confirmations", err)
	}
	return ps, nil
}

// ErrSettingsNotice is the error about a notice that SettingsNotice cannot read.
var ErrSettingsNotice = errors.New("not a settings notice")

// SettingsNotice reads a notice of SettingsChannel: the queue, the new revision and the
// token of a pause that waits for confirmations ("" for any other change).
func SettingsNotice(msg string) (queue string, rev int64, token string, err error) {
	parts := strings.SplitN(msg, " ", 3)
	if len(parts) != 3 {
		return "", 0, "", ErrSettingsNotice
	}
	rev, err = strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return "", 0, "", ErrSettingsNotice
	}
	return parts[2], rev, parts[1], nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ReadRoute reads what a publish needs of queue in one round trip: its partition count (as
// PartitionCount does) and its settings record. The legacy pause is left out: publishing
// ignores pauses.
func (s *Store) ReadRoute(ctx context.Context, queue string) (int, Settings, error) {
	var count *redis.StringCmd
	var rec *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		count = p.HGet(ctx, keys.Partitions(s.prefix), queue)
		rec = p.HGetAll(ctx, SettingsKey(s.prefix, queue))
		return nil
	})
	if err := pipelineErr(err, count, rec); err != nil {
		return 0, Settings{}, rediserr.Wrap("queues", fmt.Errorf("read the partition count and settings of %s: %w", queue, err))
	}
	if err := rec.Err(); err != nil {
		return 0, Settings{}, rediserr.Wrap("queues", fmt.Errorf("read the settings of %s: %w", queue, err))
	}
	st, err := parseSettings(queue, rec.Val(), false)
	if err != nil {
		return 0, Settings{}, err
	}
	v, err := count.Result()
	if errors.Is(err, redis.Nil) {
		return 1, st, nil
	}
	if err != nil {
		return 0, Settings{}, rediserr.Wrap("queues", fmt.Errorf("read the partition count of %s: %w", queue, err))
	}
	p, err := ParsePartitions(queue, v)
	return p, st, err
}

// DeleteSettings removes queue's record and its place in the legacy set, and announces it:
// a queue made again under the name starts with no settings, unpaused.
func (s *Store) DeleteSettings(ctx context.Context, queue string) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, SettingsKey(s.prefix, queue))
		p.SRem(ctx, keys.Paused(s.prefix), queue)
		p.Publish(ctx, SettingsChannel(s.prefix), "0  "+queue)
		return nil
	})
	return rediserr.Wrap("queue settings", err)
}
