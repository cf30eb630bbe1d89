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
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/status"
)

// The reads (and the few plain writes) of queue state: the known-queues set, the partition
// counts, the gauges and counters, and the keys of a queue as a whole.

// Stats are a queue's (or a partition's) gauges and counters. Its fields are pipeline's
// QueueStats's, in the same order, so that one converts to the other.
type Stats struct {
	Queue string
	// Gauges: jobs in each place now.
	Scheduled  int64
	Queued     int64
	InProgress int64
	Dead       int64
	// Counters since the queue was created (keys.Stat*).
	Enqueued       int64
	Completed      int64
	Failed         int64
	Retried        int64
	Recovered      int64
	DeadByRecovery int64
	Refused        int64
	Canceled       int64
	Released       int64
	Poison         int64
	Debounced      int64 // publishes that joined a pending debounced job
	// Paused is not read by ReadStats (see KnownQueuesPaused, IsPausedQueue); it is here so
	// that pipeline.QueueStats converts from Stats.
	Paused  bool
	Limited int64 // deferrals by a flow-control limit
	// GroupWaiting is how many of the Queued jobs wait for a place in their fair group's
	// window (keys.StatGroupWaiting): queued, not yet in the stream.
	GroupWaiting int64
	// Waiting, LimitWaiting, LatencyMS and WaitingFor are pipeline.QueueStats's.
	Waiting      int64
	LimitWaiting int64
	LatencyMS    int64
	WaitingFor   map[status.Reason]int64
	// RejectedFull and DroppedFull count the publishes a full queue refused and the jobs it
	// dropped (keys.StatRejectedFull, StatDroppedFull).
	RejectedFull int64
	DroppedFull  int64
}

// ReadStats reads the gauges and counters of queues qs in one pipeline: one round trip on a
// standalone server, one per node that holds some of the queues on a cluster, and a second one
// only when jobs wait for a concurrency slot. The gauges count every live job once, by where
// it is (docs/STATE_MACHINE.md, "Statuses"): Scheduled is the scheduled set plus the jobs in
// the limits' wait lists (LimitWaiting); Queued is the stream's length less the entries handed
// out, plus the jobs waiting in fair groups (GroupWaiting: queued too, not yet in the stream);
// InProgress the entries handed out; Waiting the workflow tasks in the index of waiting tasks.
// A queue no worker read yet has none handed out. Queued and InProgress count the jobs of
// every priority level (keys.Queue.LevelStream): the streams of levels no job used are
// missing, which reads as empty.
func (s *Store) ReadStats(ctx context.Context, qs []keys.Queue) ([]*Stats, error) {
	type cmds struct {
		counters             *redis.MapStringStringCmd
		sched, dead, waiting *redis.IntCmd
		limitWaiters         *redis.StringSliceCmd
		xlen                 [keys.MaxPriority]*redis.IntCmd
		groups               [keys.MaxPriority]*redis.XInfoGroupsCmd
	}
	all := make([]cmds, len(qs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			all[k] = cmds{
				counters:     p.HGetAll(ctx, q.Stats()),
				sched:        p.ZCard(ctx, q.Scheduled()),
				dead:         p.ZCard(ctx, q.Dead()),
				waiting:      p.ZCard(ctx, q.WorkflowWaiting()),
				limitWaiters: p.SMembers(ctx, q.LimitWaiters()),
			}
			for l := range keys.MaxPriority {
				all[k].xlen[l] = p.XLen(ctx, q.LevelStream(l+1))
				all[k].groups[l] = p.XInfoGroups(ctx, q.LevelStream(l+1))
			}
		}
		return nil
	})
	out := make([]*Stats, len(qs))
	for k, q := range qs {
		c := &all[k]
		for _, cmd := range []redis.Cmder{c.counters, c.sched, c.dead, c.waiting, c.limitWaiters, c.xlen[0], c.xlen[1], c.xlen[2], c.xlen[3]} {
			if err := cmd.Err(); err != nil {
				return nil, rediserr.Wrap("stats", fmt.Errorf("stats %s: %w", q.Name(), err))
			}
		}
		s := &Stats{Queue: q.Name(), Scheduled: c.sched.Val(), Dead: c.dead.Val(), Waiting: c.waiting.Val()}
		for l := range keys.MaxPriority {
			// A stream no worker has read yet has no group: that is zero in flight.
			if err := c.groups[l].Err(); err != nil && !rediserr.IsNoStream(err) {
				return nil, rediserr.Wrap("stats", fmt.Errorf("stats %s: %w", q.Name(), err))
			}
			var pending int64
			for _, g := range c.groups[l].Val() {
				if g.Name == keys.Group {
					pending = g.Pending
				}
			}
			s.InProgress += pending
			s.Queued += max(0, c.xlen[l].Val()-pending)
		}
		m := c.counters.Val()
		n := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
		s.Enqueued, s.Completed, s.Failed = n(keys.StatEnqueued), n(keys.StatCompleted), n(keys.StatFailed)
		s.Retried, s.Recovered = n(keys.StatRetried), n(keys.StatRecovered)
		s.DeadByRecovery, s.Refused = n(keys.StatDeadByRecovery), n(keys.StatRefused)
		s.Canceled, s.Released, s.Poison = n(keys.StatCanceled), n(keys.StatReleased), n(keys.StatPoison)
		s.Debounced = n(keys.StatDebounced)
		s.Limited = n(keys.StatLimited)
		s.RejectedFull, s.DroppedFull = n(keys.StatRejectedFull), n(keys.StatDroppedFull)
		s.GroupWaiting = max(0, n(keys.StatGroupWaiting))
		s.Queued += s.GroupWaiting
		out[k] = s
	}
	if err != nil && len(qs) > 0 && !rediserr.IsNoStream(err) {
		// Every command carries its own error; a pipeline error that none of them reports is
		// still a failure.
		return nil, rediserr.Wrap("stats", fmt.Errorf("stats: %w", err))
	}
	if err := s.readLimitWaiting(ctx, qs, out, func(k int) []string { return all[k].limitWaiters.Val() }); err != nil {
		return nil, err
	}
	return out, nil
}

// readLimitWaiting adds to each of out (ReadStats' of qs) the jobs waiting in its limits' wait
// lists, the instances of qs[k]'s lists being insts(k): one pipeline of LLEN, none when no job
// waits. Those jobs are scheduled (LimitWaiting, part of Scheduled). A cancel takes its job
// out of its list (cancel.lua), so a list's length is the jobs that wait.
func (s *Store) readLimitWaiting(ctx context.Context, qs []keys.Queue, out []*Stats, insts func(k int) []string) error {
	lens := make([][]*redis.IntCmd, len(qs))
	n := 0
	for k := range qs {
		n += len(insts(k))
	}
	if n == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			for _, inst := range insts(k) {
				lens[k] = append(lens[k], p.LLen(ctx, q.LimitWaiting(inst)))
			}
		}
		return nil
	})
	if err != nil {
		return rediserr.Wrap("stats", fmt.Errorf("stats: the limits' wait lists: %w", err))
	}
	for k, cs := range lens {
		for _, c := range cs {
			out[k].LimitWaiting += c.Val()
		}
		out[k].Scheduled += out[k].LimitWaiting
	}
	return nil
}

// ---- The known queues and their partition counts ----

// spreadScheme ends every partition count this version stores ("3/spread"). It says the
// partition tags spread over the slots (keys.PartitionName). The version before stored a bare
// count. Its partitions were {q#i}, in whatever slot that fell in. This version does not read
// those keys (ErrLegacyLayout), and the version before refuses a count with the suffix. So two
// versions never route one queue's jobs to different keys.
const spreadScheme = "/spread"

// StoredPartitions is how a partition count of p > 1 is stored.
func StoredPartitions(p int) string { return strconv.Itoa(p) + spreadScheme }

// ErrLegacyLayout is the error about a queue partitioned by the version before this one.
var ErrLegacyLayout = errors.New("partitioned by an older Conveyor (partition keys {queue#i}), whose keys this version does not read: drain it with that version, then delete it (conveyor queues delete, which this version can do) and create it again")

// ParsePartitions reads queue's stored partition count v.
func ParsePartitions(queue, v string) (int, error) {
	num, spread := strings.CutSuffix(v, spreadScheme)
	p, err := strconv.Atoi(num)
	if err != nil || p < 1 || p > keys.MaxPartitions || strconv.Itoa(p) != num {
		return 0, fmt.Errorf("partition count of %s in Redis is %q, not a number in 1..%d", queue, v, keys.MaxPartitions)
	}
	if !spread && p > 1 {
		return 0, fmt.Errorf("queue %s: %w", queue, ErrLegacyLayout)
	}
	return p, nil
}

// PartitionCount reads how many partitions queue has (1 when none was set).
func PartitionCount(ctx context.Context, rdb redis.Cmdable, prefix, queue string) (int, error) {
	v, err := rdb.HGet(ctx, keys.Partitions(prefix), queue).Result()
	if errors.Is(err, redis.Nil) {
		return 1, nil
	}
	if err != nil {
		return 0, rediserr.Wrap("queues", fmt.Errorf("read the partition count of %s: %w", queue, err))
	}
	return ParsePartitions(queue, v)
}

// CountError is a stored partition count that cannot be used (ParsePartitions' error).
type CountError struct{ Err error }

func (e *CountError) Error() string { return e.Err.Error() }

func (e *CountError) Unwrap() error { return e.Err }

// PartitionCounts reads the partition count of each of queues in one round trip: 1 for a
// queue with none stored. A stored count it cannot use is a *CountError.
func (s *Store) PartitionCounts(ctx context.Context, queues []string) ([]int, error) {
	vals, err := s.rdb.HMGet(ctx, keys.Partitions(s.prefix), queues...).Result()
	if err != nil {
		return nil, err
	}
	counts := make([]int, len(vals))
	for k, v := range vals {
		counts[k] = 1
		if str, ok := v.(string); ok {
			if counts[k], err = ParsePartitions(queues[k], str); err != nil {
				return nil, &CountError{Err: err}
			}
		}
	}
	return counts, nil
}

// LegacyPartitions returns the partitions of a queue whose stored count is one the version
// before wrote ({q#i}), or none when it is not such a count.
func LegacyPartitions(ctx context.Context, rdb redis.Cmdable, prefix, queue string) ([]keys.Queue, error) {
	v, err := rdb.HGet(ctx, keys.Partitions(prefix), queue).Result()
	if err != nil {
		return nil, rediserr.Wrap("queues", err)
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 2 || p > keys.MaxPartitions {
		return nil, nil
	}
	qs := make([]keys.Queue, p)
	for i := range qs {
		qs[i] = keys.New(prefix, queue+string(keys.PartitionSep)+strconv.Itoa(i))
	}
	return qs, nil
}

// KnownQueues reads, in one round trip, the known queue names that are valid queue names,
// sorted. (One written by hand names no keys of ours.) It also reads the partition counts of
// those that have more than one.
func (s *Store) KnownQueues(ctx context.Context) ([]string, map[string]int, error) {
	names, counts, _, err := KnownQueuesPaused(ctx, s.rdb, s.prefix)
	return names, counts, err
}

// KnownQueuesPaused is KnownQueues that also reads the paused queues (PausedQueues), in the
// same round trip.
func KnownQueuesPaused(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, map[string]int, map[string]bool, error) {
	var names, paused *redis.StringSliceCmd
	var m *redis.MapStringStringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		names = p.SMembers(ctx, keys.Queues(prefix))
		m = p.HGetAll(ctx, keys.Partitions(prefix))
		paused = p.SMembers(ctx, keys.Paused(prefix))
		return nil
	})
	if err := pipelineErr(err, names, m, paused); err != nil {
		return nil, nil, nil, rediserr.Wrap("queues", fmt.Errorf("list queues: %w", err))
	}
	if err := names.Err(); err != nil {
		return nil, nil, nil, rediserr.Wrap("queues", fmt.Errorf("list queues: %w", err))
	}
	if err := m.Err(); err != nil {
		return nil, nil, nil, rediserr.Wrap("queues", fmt.Errorf("read the partition counts: %w", err))
	}
	if err := paused.Err(); err != nil {
		return nil, nil, nil, rediserr.Wrap("queues", fmt.Errorf("read the paused queues: %w", err))
	}
	qs := slices.DeleteFunc(names.Val(), func(n string) bool { return keys.ValidateQueue(n) != nil })
	slices.Sort(qs)
	counts := make(map[string]int, len(m.Val()))
	// In name order, so that of several unusable counts the same one is reported each time.
	for _, q := range slices.Sorted(maps.Keys(m.Val())) {
		v := m.Val()[q]
		p, err := ParsePartitions(q, v)
		if err != nil {
			return nil, nil, nil, err
		}
		counts[q] = p
	}
	return qs, counts, pausedSet(paused.Val()), nil
}

func pausedSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

// pauseAcksTTL is how long a queue's pause confirmations outlive the last one.
const pauseAcksTTL = time.Minute

// AckPause records that worker applied the pause of queue with token: it reads the queue no
// more. It announces it on keys.PauseAckChannel, in the same round trip.
func AckPause(ctx context.Context, rdb redis.UniversalClient, prefix, queue, worker, token string) error {
	k := keys.PauseAcks(prefix, queue)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k, worker, token)
		p.PExpire(ctx, k, pauseAcksTTL)
		p.Publish(ctx, keys.PauseAckChannel(prefix), token+" "+worker)
		return nil
	})
	return rediserr.Wrap("confirm pause", err)
}

// PauseAckNotice reads a notice of keys.PauseAckChannel: the pause's token and the worker
// that confirmed it.
func PauseAckNotice(msg string) (token, worker string) {
	token, worker, _ = strings.Cut(msg, " ")
	return token, worker
}

// PauseAcks reads the confirmations of queue's pauses: the token each worker last confirmed.
func PauseAcks(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (map[string]string, error) {
	m, err := rdb.HGetAll(ctx, keys.PauseAcks(prefix, queue)).Result()
	return m, rediserr.Wrap("pause confirmations", err)
}

// PausedQueues reads the set of paused queues (one SMEMBERS).
func PausedQueues(ctx context.Context, rdb redis.UniversalClient, prefix string) (map[string]bool, error) {
	names, err := rdb.SMembers(ctx, keys.Paused(prefix)).Result()
	if err != nil {
		return nil, err
	}
	return pausedSet(names), nil
}

// IsPausedQueue reports whether queue is paused.
func IsPausedQueue(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (bool, error) {
	return rdb.SIsMember(ctx, keys.Paused(prefix), queue).Result()
}

// IsKnownQueue reports whether queue is in the known-queues set.
func (s *Store) IsKnownQueue(ctx context.Context, queue string) (bool, error) {
	ok, err := s.rdb.SIsMember(ctx, keys.Queues(s.prefix), queue).Result()
	return ok, rediserr.Wrap("queues", err)
}

// ForgetQueue removes queue from the known-queues set.
func (s *Store) ForgetQueue(ctx context.Context, queue string) error {
	return rediserr.Wrap("delete queue", s.rdb.SRem(ctx, keys.Queues(s.prefix), queue).Err())
}

// ForgetPartitions deletes queue's stored partition count: it has one partition again.
func ForgetPartitions(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) error {
	return rediserr.Wrap("delete queue", rdb.HDel(ctx, keys.Partitions(prefix), queue).Err())
}

// ---- A queue's keys as a whole ----

// scanCount is the COUNT of each SCAN page of ScanKeys.
const scanCount = 1000

// ScanKeys counts the keys that start with start with SCAN pages of 1000 keys, and unlinks
// them a page at a time when unlink is true. On a cluster it scans the master of start's slot
// only. That master holds every key of a queue, since each starts with the queue's base
// (prefix:{queue}:). With everywhere true it scans every master instead. That is for a start
// that names keys in many slots, such as every partition of a queue. A Ring's every shard is
// scanned.
func (s *Store) ScanKeys(ctx context.Context, start string, unlink, everywhere bool) (int, error) {
	n, err := scanKeys(ctx, s.rdb, start, unlink, everywhere)
	return n, rediserr.Wrap("scan", err)
}

func scanKeys(ctx context.Context, rdb redis.UniversalClient, prefix string, unlink, everywhere bool) (int, error) {
	base, pattern := prefix, globEscape(prefix)+"*"
	del := func(ctx context.Context, c redis.Cmdable) (int, error) {
		n := 0
		var cursor uint64
		for {
			page, next, err := c.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return n, err
			}
			if !unlink {
				n += len(page)
			} else if len(page) > 0 {
				m, err := unlinkPage(ctx, c, page, everywhere)
				n += m
				if err != nil {
					return n, err
				}
			}
			if cursor = next; cursor == 0 {
				return n, nil
			}
		}
	}
	var mu sync.Mutex
	total := 0
	sum := func(ctx context.Context, node *redis.Client) error {
		n, err := del(ctx, node)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if everywhere {
			err := c.ForEachMaster(ctx, sum)
			return total, err
		}
		node, err := c.MasterForKey(ctx, base)
		if err != nil {
			return 0, err
		}
		return del(ctx, node)
	case *redis.Ring:
		err := c.ForEachShard(ctx, sum)
		return total, err
	}
	return del(ctx, rdb)
}

// unlinkPage unlinks the keys of one SCAN page: with one UNLINK when they share a slot, else
// (apart, a cluster's node refuses a command over many slots) one UNLINK each, pipelined.
func unlinkPage(ctx context.Context, c redis.Cmdable, page []string, apart bool) (int, error) {
	if !apart {
		m, err := c.Unlink(ctx, page...).Result()
		return int(m), err
	}
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range page {
			p.Unlink(ctx, k)
		}
		return nil
	})
	n := 0
	for _, cmd := range cmds {
		n += int(cmd.(*redis.IntCmd).Val())
	}
	return n, err
}

// globEscape escapes the characters that are special in a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

//go:embed addqueue.lua
var addQueueSrc string

var addQueueScript = newScript(addQueueSrc)

// AddQueueParams is an AddQueue: the queue, the most known queues there may be, and whether only
// a queue already known may pass (nothing is added).
type AddQueueParams struct {
	Queue     string
	MaxQueues int
	KnownOnly bool
}

// Added is AddQueue's answer.
type Added int

// AddQueue's answers.
const (
	QueueKnown   Added = iota // known already, or added now
	QueuesFull                // new, and the known queues number MaxQueues already
	QueueUnknown              // new, and KnownOnly was asked
)

// AddQueue makes p.Queue a known queue of prefix (addqueue.lua), refusing a new one past
// p.MaxQueues or, with p.KnownOnly, any new one.
func (s *Store) AddQueue(ctx context.Context, p AddQueueParams) (Added, error) {
	only := "0"
	if p.KnownOnly {
		only = "1"
	}
	n, err := addQueueScript.Run(ctx, s.rdb, []string{keys.Queues(s.prefix)}, p.Queue, p.MaxQueues, only).Int()
	switch {
	case err != nil:
		return 0, rediserr.Wrap("add queue", err)
	case n == 0:
		return QueuesFull, nil
	case n < 0:
		return QueueUnknown, nil
	}
	return QueueKnown, nil
}

// QueueLevels reads, for each of qs, the priority levels above 1 its jobs were published with
// (keys.Queue.Levels), sorted: one pipelined SMEMBERS per queue or partition.
func QueueLevels(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue) ([][]int, error) {
	cmds := make([]*redis.StringSliceCmd, len(qs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			cmds[k] = p.SMembers(ctx, q.Levels())
		}
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("levels", err)
	}
	out := make([][]int, len(qs))
	for k, c := range cmds {
		out[k] = parseLevels(c.Val())
	}
	return out, nil
}

// parseLevels is the levels above MinPriority of a keys.Queue.Levels set, sorted.
func parseLevels(vals []string) []int {
	var out []int
	for _, v := range vals {
		if n, err := strconv.Atoi(v); err == nil && n > keys.MinPriority && n <= keys.MaxPriority {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// ScanState is what a recoverer's scan of q reads first, in one round trip. It reads q's
// levels (QueueLevels), and whether q's work list of workflow cascades holds anything
// (keys.Queue.WorkflowCascade). So an idle scan calls no FollowCascade.
func (s *Store) ScanState(ctx context.Context, q keys.Queue) (levels []int, cascades bool, err error) {
	var lv *redis.StringSliceCmd
	var left *redis.IntCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		lv = p.SMembers(ctx, q.Levels())
		left = p.Exists(ctx, q.WorkflowCascade())
		return nil
	})
	if err != nil {
		return nil, false, rediserr.Wrap("levels", err)
	}
	return parseLevels(lv.Val()), left.Val() > 0, nil
}
