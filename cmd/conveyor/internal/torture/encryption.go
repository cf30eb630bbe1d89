package torture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redisproc"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// The encryption workload's keys: OldKey seals from the start; NewKey is listed first
// partway through, and everything stored must be under it at the end.
const (
	OldKey = "k1"
	NewKey = "k2"
)

// Digest is what the ledger keeps of a payload or a result: enough of its SHA-256 to tell two
// apart, short enough to keep the ledger small.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// echoMark is in every payload of the encryption workload (Work.Echo) and in no other value
// the run stores: a value holding it is a payload stored in plain text.
const echoMark = `"echo":true`

// keySet is the encryption workload's keys: the two lines of a key file, and which of them
// the processes list now.
type keySet struct {
	mu       sync.Mutex
	old, new string // key file lines
	rotated  bool   // the processes list NewKey first
}

func newKeySet() (*keySet, error) {
	o, err := keyring.NewLine(OldKey)
	if err != nil {
		return nil, err
	}
	n, err := keyring.NewLine(NewKey)
	if err != nil {
		return nil, err
	}
	return &keySet{old: o, new: n}, nil
}

// text is the key file the processes are given now: OldKey alone, then NewKey first and
// OldKey after it (an operator's rotation: the old key still opens what it sealed).
func (k *keySet) text() string {
	if k == nil {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rotated {
		return k.new + "\n" + k.old + "\n"
	}
	return k.old + "\n"
}

func (k *keySet) rotate() {
	k.mu.Lock()
	k.rotated = true
	k.mu.Unlock()
}

// keyring is the keyring of text(); nil without the encryption workload.
func (k *keySet) keyring() (*keyring.Keyring, error) {
	if k == nil {
		return nil, nil
	}
	return keyring.Parse(k.text())
}

// newOnly is a keyring of NewKey alone: what must open everything stored at the end.
func (k *keySet) newOnly() (*keyring.Keyring, error) { return keyring.Parse(k.new + "\n") }

// env is the environment entry that hands a process the keys now listed ($CONVEYOR_KEYS
// holds the key file's text); nil without the encryption workload.
func (k *keySet) env() []string {
	if k == nil {
		return nil
	}
	return []string{keyring.EnvVar + "=" + k.text()}
}

// producer is the producer's client now: the run replaces it when the keys change.
func (r *run) producer() *pipeline.Client {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.pclient
}

// rotateKeys is the encryption workload's rotation, as an operator makes it while the
// nemeses strike: at an eighth of the run, list NewKey first on every process (the workers
// replaced, each successor with the new key file, then the producer), then re-seal what is
// stored with `conveyor keys rotate`, run again and again until struck is closed (the nemeses
// are done). The workers go first so that no worker lacks the key of a payload it is
// handed. It returns the restarts made: each SIGTERM may cut its worker's attempts short, as
// term-worker's does.
func (r *run) rotateKeys(ctx context.Context, begin time.Time, struck <-chan struct{}) (restarts int, err error) {
	sleep(ctx, time.Until(begin.Add(r.size.Duration/8)))
	if ctx.Err() != nil {
		return 0, nil
	}
	// Under slotMu: a worker nemesis striking now started its replacement under the old keys;
	// every worker started after this one has the new.
	r.slotMu.Lock()
	r.keys.rotate()
	r.slotMu.Unlock()
	r.log("keys: %s listed first; replacing the workers", NewKey)
	// A rolling restart: each worker's successor starts before it is stopped, and the old
	// ones drain at once (SIGTERM), so that a loaded machine still switches the producer while
	// it publishes. The producer waits for every old worker to exit: none of them has NewKey.
	var olds sync.WaitGroup
	defer olds.Wait()
	for i := range r.opt.Workers {
		r.slotMu.Lock()
		r.wmu.Lock()
		old := r.workers[i]
		r.wmu.Unlock()
		err := r.replaceWorker(i)
		r.slotMu.Unlock()
		if err != nil {
			return restarts, err
		}
		olds.Go(old.term)
		restarts++
	}
	olds.Wait()
	k, err := r.keys.keyring()
	if err != nil {
		return restarts, err
	}
	c, err := pipeline.NewClient(r.producerRDB, pipeline.ClientConfig{Keys: k})
	if err != nil {
		return restarts, err
	}
	r.pmu.Lock()
	r.pclient = c
	r.pmu.Unlock()
	r.wmu.Lock() // a worker nemesis may be replacing one
	pids := r.pids()
	r.wmu.Unlock()
	r.log("keys: workers %s and the producer list %s first; rotating", pids, NewKey)
	return restarts, r.rotateUntilDone(ctx, "rotation", begin, struck, false)
}

// rotateReport is the part of `conveyor keys rotate --json`'s report the run reads.
type rotateReport struct {
	Key   string                `json:"key"`
	Total pipeline.RotateCounts `json:"total"`
}

// rotateUntilDone runs `conveyor keys rotate` (the binary, with the key file now listed in
// its environment) again and again, as an operator would rerun it: a run cut short by a fault,
// or one that left jobs running or moved on, is run again. The final rotation (final) stops at
// the first run that reports nothing moved on, running or failed, and fails when until is
// closed or ctx ends before one does. Mid-run, under load, jobs are always running, and a run
// finding nothing left may be followed by a failover that loses a re-seal the old master
// acknowledged: it goes on until until is closed (the nemeses are done, those striking after
// the run's duration too), so that every nemesis strikes while it runs, and leaves the rest to
// the final rotation. It returns an error when values did not open (the keyring lists every
// key used, so they are damaged). Its log line says when, since begin, it stopped.
func (r *run) rotateUntilDone(ctx context.Context, what string, begin time.Time, until <-chan struct{}, final bool) error {
	var total pipeline.RotateCounts
	runs, failures, clean := 0, 0, 0
	var last error
	for {
		rep, err := r.rotateOnce(ctx)
		runs++
		switch {
		case err != nil:
			failures++
			last = err
		case rep.Total.Failed > 0:
			return fmt.Errorf("%s: keys rotate could not open %d values (missing keys %v)", what, rep.Total.Failed, rep.Total.MissingKeys)
		default:
			total.Resealed += rep.Total.Resealed
			total.Sealed += rep.Total.Sealed
			last = fmt.Errorf("%d moved on, %d running", rep.Total.MovedOn, rep.Total.Running)
		}
		done := err == nil && rep.Total.Left() == 0
		if done {
			clean++
		}
		stopped := false
		select {
		case <-until:
			stopped = true
		default:
		}
		if (done && final) || ctx.Err() != nil || stopped {
			left := "nothing left"
			if !done {
				left = last.Error()
			}
			r.log("%s: %d runs of keys rotate (%d cut short by a fault, %d finding nothing left) re-sealed %d values under %s and sealed %d plain ones, until %s; the last: %s",
				what, runs, failures, clean, total.Resealed, NewKey, total.Sealed, time.Since(begin).Round(time.Millisecond), left)
			if !done && final {
				return fmt.Errorf("%s: keys rotate did not finish (%d runs): %w", what, runs, last)
			}
			return nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// rotateOnce runs `conveyor keys rotate --queue torture --json` once.
func (r *run) rotateOnce(ctx context.Context) (rotateReport, error) {
	args := []string{"keys", "rotate", "--redis", r.url, "--prefix", pipeline.DefaultPrefix, "--queue", Queue,
		"--batch", "50", "--json", "--log-format", "json"}
	if r.cluster != nil {
		args = append(args, "--cluster")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.opt.Bin, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CONVEYOR_") }), r.keys.env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = redisproc.SysProcAttr()
	if err := cmd.Run(); err != nil {
		return rotateReport{}, fmt.Errorf("keys rotate: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var rep rotateReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return rep, fmt.Errorf("keys rotate: its report: %w", err)
	}
	if rep.Key != NewKey {
		return rep, fmt.Errorf("keys rotate sealed under %q, not %s", rep.Key, NewKey)
	}
	return rep, nil
}

// observeSealed fills in an Observed record of the encryption workload from j, read without
// keys: the key its payload and result are under, and what each opens to with NewKey alone.
func observeSealed(rec *Record, j *pipeline.Job, newOnly *keyring.Keyring) {
	digest := func(kind keyring.Kind, b []byte) (key, sum string) {
		if len(b) == 0 {
			return "", ""
		}
		if !keyring.Sealed(b) {
			return "", Digest(b)
		}
		key, _ = keyring.KeyID(b)
		p, err := newOnly.Open(kind, j.ID, b)
		if err != nil {
			return key, ""
		}
		return key, Digest(p)
	}
	rec.Key, rec.Sum = digest(keyring.Payload, j.Payload)
	rec.ResultKey, rec.ResultSum = digest(keyring.Result, j.Result)
	if rec.Key == "" && rec.Sum != "" {
		rec.Key = "plain"
	}
	if rec.ResultKey == "" && rec.ResultSum != "" {
		rec.ResultKey = "plain"
	}
}

// scanSealed reads every value of every key Redis holds. It notes the values sealed under a
// key other than newest, and those holding a payload of the workload in plain text, each
// with the keys holding them. It reads strings, hashes, lists, sets, sorted sets' members
// and streams' fields.
func (r *run) scanSealed(ctx context.Context, newest string) ([]string, error) {
	var mu sync.Mutex
	stale := map[string]int{} // key: values under another key
	plain := map[string]int{} // key: values holding a payload in plain text
	under := map[string]bool{}
	err := r.eachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			vals, err := values(ctx, m, key)
			if err != nil {
				return fmt.Errorf("reading %s: %w", key, err)
			}
			mu.Lock()
			for _, v := range vals {
				switch id, ok := keyring.KeyID([]byte(v)); {
				case ok && id != newest:
					stale[key]++
					under[id] = true
				case !ok && strings.Contains(v, echoMark):
					plain[key]++
				}
			}
			mu.Unlock()
		}
		return iter.Err()
	})
	var notes []string
	note := func(counts map[string]int, what string) {
		if len(counts) == 0 {
			return
		}
		n := 0
		for _, c := range counts {
			n += c
		}
		keys := slices.Sorted(maps.Keys(counts))
		notes = append(notes, fmt.Sprintf("%d values %s, in %d keys: %s", n, what, len(keys), some(keys, nil)))
	}
	note(stale, "sealed under "+strings.Join(slices.Sorted(maps.Keys(under)), ", ")+", not "+newest)
	note(plain, "holding a payload in plain text")
	return notes, err
}

// values are the values key holds, of whichever type it is.
func values(ctx context.Context, m *redis.Client, key string) ([]string, error) {
	typ, err := m.Type(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "string":
		v, err := m.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return []string{v}, err
	case "hash":
		h, err := m.HGetAll(ctx, key).Result()
		var out []string
		for f, v := range h {
			out = append(out, f, v)
		}
		return out, err
	case "list":
		return m.LRange(ctx, key, 0, -1).Result()
	case "set":
		return m.SMembers(ctx, key).Result()
	case "zset":
		return m.ZRange(ctx, key, 0, -1).Result()
	case "stream":
		msgs, err := m.XRange(ctx, key, "-", "+").Result()
		var out []string
		for _, msg := range msgs {
			for f, v := range msg.Values {
				out = append(out, f, fmt.Sprint(v))
			}
		}
		return out, err
	}
	return nil, nil // gone meanwhile ("none"), or a type no job value is stored in
}
