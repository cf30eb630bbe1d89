package stream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

const testGroup = "conveyor"

// newTestSubscriber returns a Subscriber on rdb in testGroup with cfg's other fields, closed in
// t.Cleanup.
func newTestSubscriber(t testing.TB, rdb redis.UniversalClient, cfg Config) *Subscriber {
	t.Helper()
	cfg.Client = rdb
	if cfg.Group == "" {
		cfg.Group = testGroup
	}
	if cfg.BlockTime == 0 {
		cfg.BlockTime = 50 * time.Millisecond
	}
	sub, err := NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// publish adds n entries in watermill-redisstream's layout (no metadata) and returns their ids
// in order; entry i has uuid prefix-i and payload "payload-i".
func publish(t testing.TB, rdb redis.UniversalClient, topic, prefix string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for start := 0; start < n; start += 1000 {
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(n, start+1000); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{
					FieldUUID, fmt.Sprintf("%s-%d", prefix, i),
					FieldPayload, fmt.Sprintf("payload-%d", i),
					FieldMetadata, "",
				}})
			}
			return nil
		})
		require.NoError(t, err)
		for _, c := range cmds {
			ids = append(ids, c.(*redis.StringCmd).Val())
		}
	}
	return ids
}

// xadd adds one entry with the given field/value pairs and returns its id.
func xadd(t testing.TB, rdb redis.UniversalClient, topic string, values ...any) string {
	t.Helper()
	id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: topic, Values: values}).Result()
	require.NoError(t, err)
	return id
}

// receive waits for the next message on ch.
func receive(t testing.TB, ch <-chan *message.Message, timeout time.Duration) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "messages channel closed")
		return msg
	case <-time.After(timeout):
		t.Fatalf("no message within %v", timeout)
		return nil
	}
}

// receiveN receives n messages from ch.
func receiveN(t testing.TB, ch <-chan *message.Message, n int, timeout time.Duration) []*message.Message {
	t.Helper()
	msgs := make([]*message.Message, 0, n)
	for range n {
		msgs = append(msgs, receive(t, ch, timeout))
	}
	return msgs
}

// requireNothing asserts that ch hands out nothing for d.
func requireNothing(t testing.TB, ch <-chan *message.Message, d time.Duration) {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s (entry %s)", msg.UUID, msg.Metadata.Get(EntryIDKey))
		}
		t.Fatal("messages channel closed")
	case <-time.After(d):
	}
}

// requireClosed waits for ch to close. A message may still arrive first: one whose hand-out
// was already waiting when shutdown began (topic.handOut: Go picks at random between a ready
// reader and a closed stopping). It is logged and nacked: its hand-out is not tried again
// once shutdown began, and the shutdown releases it without waiting CloseTimeout.
// TestSubscriber/ResubscribeAfterRelease failed on such a message in a fresh CI under two CPU
// hogs, when this helper refused it.
func requireClosed(t testing.TB, ch <-chan *message.Message, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case msg, ok := <-ch:
			if !ok {
				return
			}
			t.Logf("message %s (entry %s) handed out as shutdown began", msg.UUID, msg.Metadata.Get(EntryIDKey))
			msg.Nack()
		case <-deadline:
			t.Fatalf("messages channel not closed within %v", timeout)
		}
	}
}

func entryIDs(msgs []*message.Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Metadata.Get(EntryIDKey)
	}
	return ids
}

// pending returns the group's pending entries for topic.
func pending(t testing.TB, rdb redis.UniversalClient, topic string) []redis.XPendingExt {
	t.Helper()
	p, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: topic, Group: testGroup, Start: "-", End: "+", Count: 10_000,
	}).Result()
	require.NoError(t, err)
	return p
}

// renewedSince reports whether topic has n pending entries, each touched (its lease renewed)
// after since: its idle time is shorter than the time since then, which an entry left alone
// never has, however slow the machine. The time since is read before XPENDING, so a slow reply
// cannot make an untouched entry look renewed; Redis counts whole milliseconds, hence the 2 ms.
func renewedSince(t testing.TB, rdb redis.UniversalClient, topic string, since time.Time, n int) bool {
	t.Helper()
	d := time.Since(since)
	p := pending(t, rdb, topic)
	for _, e := range p {
		if e.Idle+2*time.Millisecond >= d {
			return false
		}
	}
	return len(p) == n
}

func pendingCount(t testing.TB, rdb redis.UniversalClient, topic string) int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), topic, testGroup).Result()
	require.NoError(t, err)
	return p.Count
}

// requeueScript puts entries back as new entries, as Conveyor's worker does in OnRelease.
// KEYS[1] stream; ARGV[1] group, ARGV[2..] ids.
var requeueScript = redis.NewScript(`
for i = 2, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e > 0 then redis.call('XADD', KEYS[1], '*', unpack(e[1][2])) end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
end
return #ARGV - 1
`)

// requeue returns an OnRelease that puts released entries back at the end of the stream.
func requeue(rdb redis.UniversalClient, group string) func(ctx context.Context, stream string, ids []string) {
	return func(ctx context.Context, stream string, ids []string) {
		args := []any{group}
		for _, id := range ids {
			args = append(args, id)
		}
		_ = requeueScript.Run(ctx, rdb, []string{stream}, args...).Err()
	}
}

// releases records OnRelease calls.
type releases struct {
	mu  sync.Mutex
	ids map[string][]string // by stream
	n   int                 // calls
}

func (r *releases) onRelease(_ context.Context, stream string, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string][]string{}
	}
	r.ids[stream] = append(r.ids[stream], ids...)
	r.n++
}

func (r *releases) get(stream string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids[stream]...)
}

// logRecorder is a watermill.LoggerAdapter that keeps error and info messages.
type logRecorder struct {
	mu     *sync.Mutex
	lines  *[]string
	fields watermill.LogFields
}

func newLogRecorder() logRecorder {
	return logRecorder{mu: new(sync.Mutex), lines: new([]string)}
}

func (l logRecorder) add(level, msg string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, fmt.Sprintf("%s %s %v", level, msg, err))
}

func (l logRecorder) Error(msg string, err error, _ watermill.LogFields) { l.add("ERROR", msg, err) }
func (l logRecorder) Info(msg string, _ watermill.LogFields)             { l.add("INFO", msg, nil) }
func (l logRecorder) Debug(string, watermill.LogFields)                  {}
func (l logRecorder) Trace(string, watermill.LogFields)                  {}
func (l logRecorder) With(f watermill.LogFields) watermill.LoggerAdapter {
	return logRecorder{mu: l.mu, lines: l.lines, fields: l.fields.Add(f)}
}

func (l logRecorder) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), *l.lines...)
}

// commandRecorder is a go-redis hook that records the commands a client sends.
type commandRecorder struct {
	mu   sync.Mutex
	cmds [][]any
}

func (r *commandRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *commandRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r *commandRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.mu.Lock()
		r.cmds = append(r.cmds, append([]any(nil), cmd.Args()...))
		r.mu.Unlock()
		return err
	}
}

// named returns the recorded commands called name (lower case).
func (r *commandRecorder) named(name string) [][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]any
	for _, c := range r.cmds {
		if s, _ := c[0].(string); s == name {
			out = append(out, c)
		}
	}
	return out
}
