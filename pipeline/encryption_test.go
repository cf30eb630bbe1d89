package pipeline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// testKeys is a keyring of the given ids, each key derived from its id, the first sealing.
func testKeys(t testing.TB, ids ...string) *keyring.Keyring {
	t.Helper()
	secrets := make([][]byte, len(ids))
	for i, id := range ids {
		s := sha256.Sum256([]byte("conveyor test key " + id))
		secrets[i] = s[:]
	}
	k, err := keyring.New(ids, secrets)
	require.NoError(t, err)
	return k
}

func standaloneAndCluster(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) { f(t, tc.rdb(t)) })
	}
}

// TestEncryptionRoundTrip: a worker with the key runs a job published with the key on its
// plaintext; the result is stored sealed, read back opened by a reader with the key and as the
// placeholder by one without.
func TestEncryptionRoundTrip(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := testKeys(t, "k1")
		b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Keys: k}})
		seen := make(chan []byte, 1)
		b.startWorker(t, pipeline.WorkerConfig{Keys: k}, map[string]pipeline.HandlerFunc{
			"enc": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				seen <- append([]byte(nil), j.Payload...)
				return []byte(`{"answer":"result-plain"}`), nil
			},
		})
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "enc", Payload: []byte(`{"q":"payload-plain"}`)})
		require.NoError(t, err)
		require.Equal(t, `{"q":"payload-plain"}`, string(j.Payload), "the publisher's Job keeps its plaintext")
		select {
		case p := <-seen:
			require.Equal(t, `{"q":"payload-plain"}`, string(p), "the handler sees the plaintext")
		case <-time.After(20 * time.Second):
			t.Fatal("the handler never ran")
		}
		done := b.waitStatus(t, j.ID, status.Completed)
		require.Equal(t, `{"q":"payload-plain"}`, string(done.Payload))
		require.Equal(t, `{"answer":"result-plain"}`, string(done.Result))
		sp, sr := done.Sealed()
		require.False(t, sp || sr)

		// As stored: both sealed, under k1, bound to the job.
		raw, err := rdb.HMGet(ctx, b.q.Job(j.ID), "payload", "result").Result()
		require.NoError(t, err)
		for i, kind := range []keyring.Kind{keyring.Payload, keyring.Result} {
			v := []byte(raw[i].(string))
			require.True(t, keyring.Sealed(v), "%s stored sealed", kind)
			id, _ := keyring.KeyID(v)
			require.Equal(t, "k1", id)
			_, err := k.Open(kind, j.ID, v)
			require.NoError(t, err)
		}

		// A Client without the key: sealed bytes, the placeholder in JSON.
		bare, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
		require.NoError(t, err)
		got, err := bare.Get(ctx, b.queue, j.ID)
		require.NoError(t, err)
		sp, sr = got.Sealed()
		require.True(t, sp && sr)
		out, err := json.Marshal(got)
		require.NoError(t, err)
		var w struct {
			Payload, Result string
			Encrypted       map[string]struct {
				Key   string
				Bytes int
			}
		}
		require.NoError(t, json.Unmarshal(out, &w))
		require.Equal(t, fmt.Sprintf("<encrypted, %d bytes, key k1>", len(`{"q":"payload-plain"}`)), w.Payload)
		require.Equal(t, fmt.Sprintf("<encrypted, %d bytes, key k1>", len(`{"answer":"result-plain"}`)), w.Result)
		require.Equal(t, "k1", w.Encrypted["payload"].Key)
		require.Equal(t, len(`{"answer":"result-plain"}`), w.Encrypted["result"].Bytes)
		require.NotContains(t, string(out), "plain")
		// Open with the key turns it back.
		require.NoError(t, got.Open(k))
		require.Equal(t, `{"answer":"result-plain"}`, string(got.Result))

		// The Inspector: with the key, plaintext; without, sealed.
		for _, tc := range []struct {
			keys   *keyring.Keyring
			sealed bool
		}{{nil, true}, {k, false}} {
			insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Keys: tc.keys})
			require.NoError(t, err)
			page, err := insp.List(ctx, b.queue, status.Completed, pipeline.Page{Limit: 10})
			require.NoError(t, err)
			require.Len(t, page.Jobs, 1)
			sp, sr := page.Jobs[0].Sealed()
			require.Equal(t, tc.sealed, sp)
			require.Equal(t, tc.sealed, sr)
			g, err := insp.Get(ctx, b.queue, j.ID)
			require.NoError(t, err)
			sp, _ = g.Sealed()
			require.Equal(t, tc.sealed, sp)
		}
		// KeepSealed: a Client that seals but reads as stored.
		keep, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k, KeepSealed: true})
		require.NoError(t, err)
		got, err = keep.Get(ctx, b.queue, j.ID)
		require.NoError(t, err)
		sp, _ = got.Sealed()
		require.True(t, sp)
	})
}

// TestEncryptionWorkerWithoutKey: a worker without the job's key never runs its handler on
// ciphertext. The attempt fails naming the key, the retry policy applies, and a worker that has
// the key runs the retry.
func TestEncryptionWorkerWithoutKey(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k1 := testKeys(t, "k1")
		b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Keys: k1}})
		for _, tc := range []struct {
			name string
			keys *keyring.Keyring
		}{{"no keyring", nil}, {"another key", testKeys(t, "k2")}} {
			t.Run(tc.name, func(t *testing.T) {
				var calls atomic.Int64
				_, stop := b.startWorker(t, pipeline.WorkerConfig{Keys: tc.keys}, map[string]pipeline.HandlerFunc{
					"enc": func(context.Context, *pipeline.Job) ([]byte, error) { calls.Add(1); return nil, nil },
				})
				// One retry: both attempts fail, then the dead set.
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "enc", Payload: []byte("secret")}, pipeline.WithMaxRetries(1))
				require.NoError(t, err)
				dead := b.waitStatus(t, j.ID, status.Failed)
				require.Zero(t, calls.Load(), "a handler ran on ciphertext")
				require.Equal(t, 2, dead.Attempt)
				require.Contains(t, dead.LastError, `payload encrypted under key "k1", which this worker's keyring lacks`)
				require.NoError(t, stop())
			})
		}

		t.Run("a worker with the key takes the retry", func(t *testing.T) {
			_, stop := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
				"enc": func(context.Context, *pipeline.Job) ([]byte, error) { return nil, errors.New("ran on ciphertext") },
			})
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "enc", Payload: []byte("secret")}, pipeline.WithMaxRetries(5))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				g, err := b.client.Get(ctx, b.queue, j.ID)
				return err == nil && g.Attempt >= 1 && strings.Contains(g.LastError, `key "k1"`)
			}, 20*time.Second, 5*time.Millisecond)
			require.NoError(t, stop())
			seen := make(chan string, 10)
			b.startWorker(t, pipeline.WorkerConfig{Keys: k1}, map[string]pipeline.HandlerFunc{
				"enc": func(_ context.Context, j *pipeline.Job) ([]byte, error) { seen <- string(j.Payload); return nil, nil },
			})
			b.waitStatus(t, j.ID, status.Completed)
			require.Equal(t, "secret", <-seen)
		})
	})
}

// TestPlaintextScan is issue 35's test: with encryption on, after jobs queued, scheduled,
// completed with results, retried, dead, debounced and in workflows, whose handlers log their
// payloads, no payload's, result's or log line's plaintext is in any Redis value, nor in the
// AOF or RDB files. A control job published
// without the key shows that the scan sees plaintext where there is some.
func TestPlaintextScan(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Start(t, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always", "--rdbcompression", "no"))
		rdb := s.Client(t)
		secret, control := runScanWorkload(t, rdb)
		require.NoError(t, rdb.Save(context.Background()).Err())
		values := scanValues(t, rdb)
		require.Contains(t, values, control, "the scan misses plaintext")
		require.NotContains(t, values, secret, "plaintext in a Redis value")
		files := 0
		require.NoError(t, filepath.WalkDir(s.Dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(path, ".log") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			require.False(t, bytes.Contains(b, []byte(secret)), "plaintext in %s", path)
			return nil
		}))
		aof, err := filepath.Glob(filepath.Join(s.Dir, "appendonlydir", "*.aof"))
		require.NoError(t, err)
		require.NotEmpty(t, aof, "no AOF written")
		var all []byte
		for _, f := range aof {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			all = append(all, b...)
		}
		require.True(t, bytes.Contains(all, []byte(control)), "the AOF scan misses plaintext")
		require.Greater(t, files, 1)
	})
	t.Run("cluster", func(t *testing.T) {
		rdb := redistest.StartCluster(t).Client(t)
		secret, control := runScanWorkload(t, rdb)
		values := scanValues(t, rdb)
		require.Contains(t, values, control, "the scan misses plaintext")
		require.NotContains(t, values, secret, "plaintext in a Redis value")
	})
}

// runScanWorkload leaves jobs in every state with encryption on, and one control job without.
// Every sealed payload and result holds the secret marker; the control's payload the control
// marker.
func runScanWorkload(t *testing.T, rdb redis.UniversalClient) (secret, control string) {
	ctx := context.Background()
	rnd := make([]byte, 8)
	_, _ = rand.Read(rnd)
	secret, control = "SECRET"+hex.EncodeToString(rnd), "CONTROL"+hex.EncodeToString(rnd)
	mark := func(what string) []byte { return []byte(fmt.Sprintf(`{"m":"%s-%s"}`, secret, what)) }
	k := testKeys(t, "k1")
	b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Keys: k}})
	other := b.queue + "-idle" // no worker reads it: its jobs stay queued
	var depsSeen atomic.Int64
	b.startWorker(t, pipeline.WorkerConfig{Keys: k, Backoff: pipeline.Backoff{Base: time.Hour, Max: time.Hour}},
		map[string]pipeline.HandlerFunc{
			"ok": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				j.Logf("running on %s", j.Payload) // a handler that logs its payload
				return append(mark("result-of"), j.Payload...), nil
			},
			"fail": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				j.Logger().Error().RawJSON("payload", j.Payload).Msg("failing")
				return nil, errors.New("boom")
			},
			"deps": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				d, err := j.Dependencies(ctx)
				if err != nil {
					return nil, err
				}
				for _, r := range d.Results {
					if !bytes.Contains(r, []byte(secret)) {
						return nil, fmt.Errorf("a dependency's result did not open: %q", r)
					}
					depsSeen.Add(1)
				}
				return mark("deps-result"), nil
			},
		})
	ids := map[string]status.Status{}
	enq := func(queue, typ, what string, opts ...pipeline.Option) {
		j, err := b.client.Enqueue(ctx, queue, pipeline.Task{Type: typ, Payload: mark(what)}, opts...)
		require.NoError(t, err)
		if queue == b.queue {
			ids[j.ID] = ""
		}
	}
	enq(other, "ok", "queued")
	enq(b.queue, "ok", "scheduled", pipeline.WithDelay(time.Hour))
	enq(b.queue, "ok", "completed")
	enq(b.queue, "fail", "retried", pipeline.WithMaxRetries(3))
	enq(b.queue, "fail", "dead", pipeline.WithMaxRetries(0))
	for i := range 3 { // a debounced job joined twice, then waiting an hour
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "ok", Payload: mark(fmt.Sprint("debounced-", i))},
			pipeline.WithDebounce("dk", time.Hour, 2*time.Hour))
		require.NoError(t, err)
	}
	jobs, err := b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{{Type: "ok", Payload: mark("batch-1")}, {Type: "ok", Payload: mark("batch-2")}})
	require.NoError(t, err)
	for _, j := range jobs {
		ids[j.ID] = ""
	}
	wf, err := b.client.Workflow(ctx, b.queue, pipeline.Chain(
		pipeline.Task{Type: "ok", Payload: mark("wf-1")}, pipeline.Task{Type: "deps", Payload: mark("wf-2")}))
	require.NoError(t, err)
	_, err = b.client.Batch(ctx, b.queue, pipeline.Batch{Jobs: []pipeline.Task{{Type: "ok", Payload: mark("batch-task")}},
		Callback: &pipeline.Task{Type: "deps", Payload: mark("callback")}})
	require.NoError(t, err)

	// The control: a Client without keys, a queue nobody reads.
	plain, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = plain.Enqueue(ctx, other, pipeline.Task{Type: "ok", Payload: []byte(control)})
	require.NoError(t, err)

	// Settled: the workflow finished, the retried job waits for its retry, the dead one died.
	require.Eventually(t, func() bool {
		st, err := b.client.GetWorkflow(ctx, b.queue, wf.ID)
		if err != nil || st.Completed != 2 {
			return false
		}
		n := map[status.Status]int{}
		for id := range ids {
			j, err := b.client.Get(ctx, b.queue, id)
			if err != nil {
				return false
			}
			if j.Status == status.Scheduled && j.Attempt == 0 {
				n["delayed"]++
			}
			n[j.Status]++
		}
		return n[status.Completed] == 3 && n[status.Failed] == 1 && n["delayed"] == 1 && n[status.Scheduled] == 2 && depsSeen.Load() == 2
	}, 30*time.Second, 10*time.Millisecond)
	// The reader with the key sees the plaintext of every one of them, their lines too.
	keyed, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Keys: k})
	require.NoError(t, err)
	logged := 0
	for id := range ids {
		j, err := b.client.Get(ctx, b.queue, id)
		require.NoError(t, err)
		require.Contains(t, string(j.Payload), secret)
		if j.Status == status.Completed {
			require.Contains(t, string(j.Result), secret)
		}
		logs, err := keyed.JobLogs(ctx, b.queue, id)
		require.NoError(t, err)
		for _, l := range logs {
			require.Nil(t, l.Sealed)
			require.Contains(t, strings.Join(l.Lines, "\n"), secret)
			logged++
		}
	}
	require.GreaterOrEqual(t, logged, 5, "the completed, retried and dead jobs logged")
	return secret, control
}

// scanValues reads every key of every master, each by its type, into one string.
func scanValues(t *testing.T, rdb redis.UniversalClient) string {
	ctx := context.Background()
	var mu sync.Mutex
	var all strings.Builder
	scan := func(ctx context.Context, c *redis.Client) error {
		var out strings.Builder
		defer func() { mu.Lock(); all.WriteString(out.String()); mu.Unlock() }()
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			out.WriteString(key + "\n")
			typ, err := c.Type(ctx, key).Result()
			if err != nil {
				return err
			}
			var v any
			switch typ {
			case "string":
				v, err = c.Get(ctx, key).Result()
			case "hash":
				v, err = c.HGetAll(ctx, key).Result()
			case "list":
				v, err = c.LRange(ctx, key, 0, -1).Result()
			case "set":
				v, err = c.SMembers(ctx, key).Result()
			case "zset":
				v, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
			case "stream":
				v, err = c.XRange(ctx, key, "-", "+").Result()
			case "none":
				continue // expired in between
			default:
				return fmt.Errorf("key %s of type %s: the scan does not read it", key, typ)
			}
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			fmt.Fprintf(&out, "%v\n", v)
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, scan))
	} else {
		require.NoError(t, scan(ctx, rdb.(*redis.Client)))
	}
	return all.String()
}

// FuzzSealedJobJSON: a job's JSON with a payload or result that looks sealed, whole or cut
// short, never panics and is valid JSON that shows no byte of what follows the key id.
func FuzzSealedJobJSON(f *testing.F) {
	k := testKeys(f, "k1")
	f.Add(k.Seal(keyring.Payload, "j", []byte(`{"a":1}`)), 0)
	f.Add([]byte("\x00cve1"), 3)
	f.Add([]byte("\x00cve1\x40k"), 9)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if cut >= 0 && cut < len(b) {
			b = b[:cut]
		}
		sealed := append([]byte("\x00cve1"), b...)
		j := &pipeline.Job{ID: "j", Payload: sealed, Result: b}
		out, err := json.Marshal(j)
		require.NoError(t, err)
		require.True(t, json.Valid(out))
		var w struct {
			Payload   string
			Encrypted struct{ Payload *struct{ Key string } }
		}
		require.NoError(t, json.Unmarshal(out, &w))
		require.True(t, strings.HasPrefix(w.Payload, "<encrypted, "), w.Payload)
		require.NotNil(t, w.Encrypted.Payload)
	})
}

// TestEncryptionDebounced: a debounced publish is sealed for no job in particular, since the
// job it joins is chosen in Redis; the worker opens the last publish's payload.
func TestEncryptionDebounced(t *testing.T) {
	ctx := context.Background()
	k := testKeys(t, "k1")
	b := setup(t, setupOpts{client: pipeline.ClientConfig{Keys: k}})
	var first *pipeline.Job
	for i := range 3 {
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "enc", Payload: []byte(fmt.Sprint("publish-", i))},
			pipeline.WithDebounce("dk", time.Hour, 2*time.Hour))
		require.NoError(t, err)
		if first == nil {
			first = j
		}
		require.Equal(t, first.ID, j.ID, "publish %d joined the window", i)
	}
	raw, err := b.rdb.HGet(ctx, b.q.Job(first.ID), "payload").Bytes()
	require.NoError(t, err)
	require.True(t, keyring.Sealed(raw))
	seen := make(chan string, 1)
	b.startWorker(t, pipeline.WorkerConfig{Keys: k}, map[string]pipeline.HandlerFunc{
		"enc": func(_ context.Context, j *pipeline.Job) ([]byte, error) { seen <- string(j.Payload); return nil, nil },
	})
	require.NoError(t, b.insp.RunNow(ctx, b.queue, first.ID)) // not the hour's quiet
	done := b.waitStatus(t, first.ID, status.Completed)
	require.Equal(t, "publish-2", <-seen)
	// No result stays no result: nothing sealed, and the JSON's null.
	require.Empty(t, done.Result)
	bare, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	got, err := bare.Get(ctx, b.queue, first.ID)
	require.NoError(t, err)
	_, sr := got.Sealed()
	require.False(t, sr)
	out, err := json.Marshal(got)
	require.NoError(t, err)
	require.Contains(t, string(out), `"result":null`)
	require.Contains(t, string(out), `"encrypted":{"payload":{"key":"k1","bytes":9}}`)
}

// TestEncryptionPublisher: the Watermill Publisher seals as its Client does, bound to the
// message's UUID, the job's id.
func TestEncryptionPublisher(t *testing.T) {
	ctx := context.Background()
	k := testKeys(t, "k1")
	b := setup(t, setupOpts{client: pipeline.ClientConfig{Keys: k}})
	p, err := pipeline.NewPublisher(b.client, pipeline.PublisherConfig{DefaultType: "enc"})
	require.NoError(t, err)
	msg := message.NewMessage(pipeline.NewID(), []byte(`{"card":"4111"}`))
	require.NoError(t, p.Publish(b.queue, msg))
	raw, err := b.rdb.HGet(ctx, b.q.Job(msg.UUID), "payload").Bytes()
	if errors.Is(err, redis.Nil) { // queued: the payload is in the stream entry
		entries, xerr := b.rdb.XRange(ctx, b.q.Stream(), "-", "+").Result()
		require.NoError(t, xerr)
		require.Len(t, entries, 1)
		raw = []byte(entries[0].Values["payload"].(string))
		err = nil
	}
	require.NoError(t, err)
	require.True(t, keyring.Sealed(raw), "stored %q", raw)
	plain, err := k.Open(keyring.Payload, msg.UUID, raw)
	require.NoError(t, err)
	require.Equal(t, `{"card":"4111"}`, string(plain))
	got, err := b.client.Get(ctx, b.queue, msg.UUID)
	require.NoError(t, err)
	require.Equal(t, `{"card":"4111"}`, string(got.Payload))
}
