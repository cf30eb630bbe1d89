package pipeline

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/stream"
)

func validEntry() map[string]any {
	md, _ := stream.EncodeMetadata(map[string]string{"tenant": "acme"})
	return map[string]any{
		keys.EntryUUID: "01JOB", keys.EntryPayload: `{"a":1}`, keys.EntryMetadata: md,
		keys.EntryJob: keys.FormatEntryJob(2, 5, 1500, "echo"),
	}
}

// An entry of another Watermill publisher (no conveyor field) reads as a job to adopt: attempt
// 1, its type from conveyor_type or the worker's default, its settings from its metadata.
func TestEntryUnmarshallerAdopts(t *testing.T) {
	t.Parallel()
	v := validEntry()
	delete(v, keys.EntryJob)
	v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{metakey.MaxRetries: "2", metakey.Timeout: "3s", "k": "v"})
	msg := entryUnmarshaller{defaultType: "fallback"}.Unmarshal("s", "1-1", v)
	require.NotContains(t, msg.Metadata, stream.PoisonKey)
	require.NotEmpty(t, msg.Metadata[metaForeign])
	j := jobFromMessage("q", msg)
	require.Equal(t, "fallback", j.Type)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, 2, j.MaxRetries)
	require.Equal(t, 3*time.Second, j.Timeout)
	require.Equal(t, "v", j.Metadata["k"])

	v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{metakey.Type: "own"})
	j = jobFromMessage("q", entryUnmarshaller{defaultType: "fallback"}.Unmarshal("s", "1-1", v))
	require.Equal(t, "own", j.Type, "the message's own type wins")
	require.Equal(t, defaultMaxRetries, j.MaxRetries)
}

func TestEntryUnmarshaller(t *testing.T) {
	t.Parallel()
	msg := entryUnmarshaller{}.Unmarshal("s", "1-1", validEntry())
	require.NotContains(t, msg.Metadata, stream.PoisonKey)
	j := jobFromMessage("q", msg)
	require.Equal(t, "01JOB", j.ID)
	require.Equal(t, "q", j.Queue)
	require.Equal(t, "echo", j.Type)
	require.Equal(t, `{"a":1}`, string(j.Payload))
	require.Equal(t, map[string]string{"tenant": "acme"}, j.Metadata)
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, 5, j.MaxRetries)
	require.EqualValues(t, 1500, j.Timeout.Milliseconds())
	require.Equal(t, "1-1", j.Entry)

	cases := []struct {
		name   string
		mutate func(map[string]any)
		reason string
	}{
		{"no uuid", func(v map[string]any) { delete(v, keys.EntryUUID) }, "_watermill_message_uuid"},
		{"bad uuid", func(v map[string]any) { v[keys.EntryUUID] = "a b" }, "_watermill_message_uuid"},
		{"no job field and no type (another publisher's message)", func(v map[string]any) { delete(v, keys.EntryJob) }, metakey.Type},
		{"another publisher's message with a bad retry count", func(v map[string]any) {
			delete(v, keys.EntryJob)
			v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{metakey.Type: "echo", metakey.MaxRetries: "-1"})
		}, metakey.MaxRetries},
		{"another publisher's message with a bad timeout", func(v map[string]any) {
			delete(v, keys.EntryJob)
			v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{metakey.Type: "echo", metakey.Timeout: "soon"})
		}, metakey.Timeout},
		{"another publisher's message with a Publisher-only key", func(v map[string]any) {
			delete(v, keys.EntryJob)
			v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{metakey.Type: "echo", metakey.Priority: "2"})
		}, metakey.Priority + ": set by Conveyor's Publisher only"},
		{"job field not a string", func(v map[string]any) { v[keys.EntryJob] = int64(3) }, "conveyor field"},
		{"no type", func(v map[string]any) { v[keys.EntryJob] = "1 5 0 " }, "conveyor field"},
		{"attempt zero", func(v map[string]any) { v[keys.EntryJob] = "0 5 0 echo" }, "conveyor field"},
		{"attempt not a number", func(v map[string]any) { v[keys.EntryJob] = "x 5 0 echo" }, "conveyor field"},
		{"negative retries", func(v map[string]any) { v[keys.EntryJob] = "1 -1 0 echo" }, "conveyor field"},
		{"no timeout", func(v map[string]any) { v[keys.EntryJob] = "1 5 echo" }, "conveyor field"},
		{"bad metadata", func(v map[string]any) { v[keys.EntryMetadata] = "\xc1" }, "metadata"},
		{"metadata overriding the entry id", func(v map[string]any) {
			v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{stream.EntryIDKey: "9-9"})
		}, "reserved metadata key"},
		{"huge attempt", func(v map[string]any) { v[keys.EntryJob] = "99999999999 5 0 echo" }, "conveyor field"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := validEntry()
			tc.mutate(v)
			msg := entryUnmarshaller{}.Unmarshal("s", "1-1", v)
			require.Contains(t, msg.Metadata[stream.PoisonKey], tc.reason)
			require.Contains(t, msg.Metadata[stream.PoisonKey], "1-1")
			require.NotEmpty(t, msg.UUID)
			require.Equal(t, "1-1", msg.Metadata[stream.EntryIDKey])
		})
	}
}

func FuzzEntryUnmarshaller(f *testing.F) {
	f.Add("01JOB", "payload", "", "1 0 0 echo")
	f.Add("", "", "\x81\xa1a\xa1b", "x -1  ")
	f.Fuzz(func(t *testing.T, uuid, payload, md, job string) {
		v := map[string]any{keys.EntryUUID: uuid, keys.EntryPayload: payload, keys.EntryMetadata: md,
			keys.EntryJob: job}
		msg := entryUnmarshaller{}.Unmarshal("s", "1-1", v)
		if msg == nil || msg.UUID == "" {
			t.Fatal("every entry becomes a message with an id")
		}
		if _, poison := msg.Metadata[stream.PoisonKey]; poison {
			return
		}
		j := jobFromMessage("q", msg)
		if j.ID != uuid || j.Type == "" || string(j.Payload) != payload || j.Attempt < 1 ||
			keys.FormatEntryJob(j.Attempt, j.MaxRetries, j.Timeout.Milliseconds(), j.Type) != job {
			t.Fatalf("readable entry decoded wrong: %+v", j)
		}
		for k := range j.Metadata {
			if k == "" || k[0] == '_' {
				t.Fatalf("reserved key %q leaked into job metadata", k)
			}
		}
	})
}

// foreignEntry is an entry of another Watermill publisher carrying metadata md.
func foreignEntry(md map[string]string) map[string]any {
	enc, _ := stream.EncodeMetadata(md)
	return map[string]any{keys.EntryUUID: "01JOB", keys.EntryPayload: "p", keys.EntryMetadata: enc}
}

// The control keys of a message of another publisher give the settings of its adoption, as
// the Publisher reads them: a delay counts from the entry's time, a timeout under a millisecond
// is one millisecond (it was 0, no timeout, before), a unique key keeps its spaces.
func TestEntryUnmarshallerAdoption(t *testing.T) {
	t.Parallel()
	const entry = "1700000000000-3"
	at := stream.EntryTime(entry)
	cases := []struct {
		name    string
		md      map[string]string
		want    engine.Adoption
		timeout time.Duration
	}{
		{"no control keys", nil, engine.Adoption{RunAt: at.UnixMilli()}, 0},
		{"delay", map[string]string{metakey.Delay: "1h"}, engine.Adoption{RunAt: at.Add(time.Hour).UnixMilli()}, 0},
		{"delay rounds up", map[string]string{metakey.Delay: "1.5ms"}, engine.Adoption{RunAt: at.UnixMilli() + 2}, 0},
		{"run_at before the entry", map[string]string{metakey.RunAt: "5"}, engine.Adoption{RunAt: at.UnixMilli()}, 0},
		{"run_at", map[string]string{metakey.RunAt: "1800000000000"}, engine.Adoption{RunAt: 1800000000000}, 0},
		{"unique key", map[string]string{metakey.UniqueKey: "report of may"},
			engine.Adoption{RunAt: at.UnixMilli(), UniqueKey: "report of may", UniqueTTL: defaultUniqueTTL.Milliseconds()}, 0},
		{"unique key and ttl", map[string]string{metakey.UniqueKey: "k", metakey.UniqueTTL: "90s"},
			engine.Adoption{RunAt: at.UnixMilli(), UniqueKey: "k", UniqueTTL: 90_000}, 0},
		{"timeout under a millisecond", map[string]string{metakey.Timeout: "1us"}, engine.Adoption{RunAt: at.UnixMilli()}, time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := entryUnmarshaller{defaultType: "echo"}.Unmarshal("s", entry, foreignEntry(c.md))
			require.NotContains(t, msg.Metadata, stream.PoisonKey)
			require.Equal(t, c.want, engine.ParseAdoption(msg.Metadata[metaForeign]))
			require.Equal(t, c.timeout, jobFromMessage("q", msg).Timeout)
		})
	}
}

// FuzzForeignControlKeys holds a Worker's reading of the control keys of another publisher's
// message to the Publisher's: the one refuses what the other refuses, and a refusal's reason
// names a control key; an accepted message is due no earlier than its entry and no later than
// maxRunAt, and keeps its unique key. (The keys only the Publisher applies,
// control.PublisherOnly, are not fed: adoption refuses them by design.)
func FuzzForeignControlKeys(f *testing.F) {
	f.Add("1h", "", "", "", "", "")
	f.Add("", "1800000000000", "3", "1us", "k k", "2h")
	f.Add("garbage", "2030-01-02T03:04:05Z", "-1", "x", "", "0s")
	client, err := NewClient(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), ClientConfig{})
	require.NoError(f, err)
	pub, err := NewPublisher(client, PublisherConfig{DefaultType: "echo"})
	require.NoError(f, err)
	const entry = "1700000000000-0"
	f.Fuzz(func(t *testing.T, delay, runAt, retries, timeout, ukey, uttl string) {
		md := map[string]string{}
		for k, v := range map[string]string{metakey.Delay: delay, metakey.RunAt: runAt, metakey.MaxRetries: retries,
			metakey.Timeout: timeout, metakey.UniqueKey: ukey, metakey.UniqueTTL: uttl} {
			if v != "" {
				md[k] = v
			}
		}
		msg := entryUnmarshaller{defaultType: "echo"}.Unmarshal("s", entry, foreignEntry(md))
		wm := message.NewMessage("01JOB", []byte("p"))
		for k, v := range md {
			wm.Metadata.Set(k, v)
		}
		_, perr := pub.task(wm)
		reason, refused := msg.Metadata[stream.PoisonKey]
		if refused {
			if !strings.Contains(reason, metakey.Prefix) {
				t.Fatalf("reason %q names no control key", reason)
			}
			if perr == nil {
				t.Fatalf("refused %v, which the Publisher takes: %s", md, reason)
			}
			return
		}
		if perr != nil {
			t.Fatalf("took %v, which the Publisher refuses: %v", md, perr)
		}
		a := engine.ParseAdoption(msg.Metadata[metaForeign])
		if a.RunAt < stream.EntryTime(entry).UnixMilli() || a.RunAt > maxRunAt.UnixMilli() {
			t.Fatalf("due at %d", a.RunAt)
		}
		if a.UniqueKey != ukey || (ukey != "") != (a.UniqueTTL > 0) {
			t.Fatalf("unique key %q, ttl %d from %q", a.UniqueKey, a.UniqueTTL, ukey)
		}
	})
}

// FuzzPublisherMetadata feeds the control keys of the Client's options (priority, group, limit
// key, retention, debounce) to the Publisher: it never panics; a refusal wraps ErrInvalid and
// names a control key; an accepted message's task is one the Client takes (Validate), keeps no
// control key in its metadata, and is published under the message's UUID unless debounced.
func FuzzPublisherMetadata(f *testing.F) {
	f.Add("2", "tenant-1", "acct", "1h", "doc", "2s", "1m", "")
	f.Add("", "", "", "", "doc", "2s", "1m", "5s")
	f.Add("0", "a b", "\x00", "-1s", "", "1s", "", "")
	f.Add("4", "", "k", "0s", "d", "1ms", "1ms", "")
	f.Add(" 3", "g", "", "1e9h", "d", "0.5s", "8761h", "")
	client, err := NewClient(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), ClientConfig{})
	require.NoError(f, err)
	pub, err := NewPublisher(client, PublisherConfig{DefaultType: "echo"})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, prio, group, limitKey, retention, dkey, dquiet, dmax, delay string) {
		msg := message.NewMessage("01JOB", []byte("p"))
		msg.Metadata.Set("tenant", "acme")
		for k, v := range map[string]string{metakey.Priority: prio, metakey.Group: group, metakey.LimitKey: limitKey,
			metakey.Retention: retention, metakey.DebounceKey: dkey, metakey.DebounceQuiet: dquiet,
			metakey.DebounceMaxWait: dmax, metakey.Delay: delay} {
			if v != "" {
				msg.Metadata.Set(k, v)
			}
		}
		task, err := pub.task(msg)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), metakey.Prefix) {
				t.Fatalf("refusal %q names no control key", err)
			}
			return
		}
		if err := Validate("q", task); err != nil {
			t.Fatalf("the Publisher took %v, which the Client refuses: %v", msg.Metadata, err)
		}
		for k := range task.Metadata {
			if strings.HasPrefix(k, metakey.Prefix) {
				t.Fatalf("control key %q kept in the job's metadata", k)
			}
		}
		var o enqueueOptions
		for _, opt := range task.Opts {
			opt(&o)
		}
		if o.hasDebounce == (o.id == "01JOB") {
			t.Fatalf("debounced %v, id %q", o.hasDebounce, o.id)
		}
		if prio != "" && strconv.Itoa(o.priority()) != prio {
			t.Fatalf("priority %d from %q", o.priority(), prio)
		}
		if o.group != group || o.limitKey != limitKey {
			t.Fatalf("group %q limit key %q from %q %q", o.group, o.limitKey, group, limitKey)
		}
	})
}
