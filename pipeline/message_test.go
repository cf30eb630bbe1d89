package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
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
	v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{MetaKeyMaxRetries: "2", MetaKeyTimeout: "3s", "k": "v"})
	msg := entryUnmarshaller{defaultType: "fallback"}.Unmarshal("s", "1-1", v)
	require.NotContains(t, msg.Metadata, stream.PoisonKey)
	require.Equal(t, "1", msg.Metadata[metaForeign])
	j := jobFromMessage("q", msg)
	require.Equal(t, "fallback", j.Type)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, 2, j.MaxRetries)
	require.Equal(t, 3*time.Second, j.Timeout)
	require.Equal(t, "v", j.Metadata["k"])

	v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{MetaKeyType: "own"})
	j = jobFromMessage("q", entryUnmarshaller{defaultType: "fallback"}.Unmarshal("s", "1-1", v))
	require.Equal(t, "own", j.Type, "the message's own type wins")
	require.Equal(t, DefaultMaxRetries, j.MaxRetries)
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
		{"no job field and no type (another publisher's message)", func(v map[string]any) { delete(v, keys.EntryJob) }, MetaKeyType},
		{"another publisher's message with a bad retry count", func(v map[string]any) {
			delete(v, keys.EntryJob)
			v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{MetaKeyType: "echo", MetaKeyMaxRetries: "-1"})
		}, MetaKeyMaxRetries},
		{"another publisher's message with a bad timeout", func(v map[string]any) {
			delete(v, keys.EntryJob)
			v[keys.EntryMetadata], _ = stream.EncodeMetadata(map[string]string{MetaKeyType: "echo", MetaKeyTimeout: "soon"})
		}, MetaKeyTimeout},
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
