package torture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/status"
)

// Kind is the kind of a ledger record.
type Kind string

// The records of the ledger. The producer writes Ack (and Indeterminate) and, at the end,
// Observed; a worker's torture handler writes Start and Finish, and its WorkerHooks.Attempts
// hook writes Commit.
const (
	// Ack: a publish was acknowledged (its id; Due for a delayed job; Expect and Need: the
	// final status the workload designed it to reach and the executions that takes).
	Ack Kind = "ack"
	// Indeterminate: a publish the producer gave up on without an answer (the run ended):
	// the job may or may not exist, and either is correct.
	Indeterminate Kind = "indeterminate"
	// Start: a handler started an attempt (id, attempt, pid, time).
	Start Kind = "start"
	// Finish: a handler returned (Outcome "ok" or "error").
	Finish Kind = "finish"
	// Commit: Redis stored an attempt's outcome (Outcome "completed", "retry" or "dead"), as
	// the worker's hook heard it. A worker killed between the write and the ledger's record
	// leaves a commit unrecorded: the final observation stands in for it.
	Commit Kind = "commit"
	// Observed: what the producer read of the job at the end (Outcome: its status, or
	// "missing"; Attempt: its attempt count).
	Observed Kind = "observed"
)

// The records of a worker process's lease of the limits (ID: the worker's name, PID: its
// pid). The runner writes them: the nemeses as they strike, the warnings after the run from
// the workers' logs. The checker bounds attempts of LimitedType by them (spans).
const (
	// Kill: a nemesis SIGKILLs the process (At: stamped before the signal). Outcome "held":
	// once it was dead, its lease was still in Redis (not taken back); "gone": it was not, or
	// Redis could not say.
	Kill Kind = "kill"
	// Stop: a nemesis SIGSTOPs the process (At: stamped before the signal). Outcome "held" or
	// "gone" as Kill's, read once every thread of it had stopped.
	Stop Kind = "stop"
	// Cont: the nemesis SIGCONTs it (At: stamped after the signal).
	Cont Kind = "cont"
	// LeaseLost: the worker logged that its lease of the limits had run out (At: the log
	// line's time, which has milliseconds, rounded up: LogTick).
	LeaseLost Kind = "lease-lost"
)

// LogTick is the precision of a worker log's time (µs). A LeaseLost record's time is the
// line's time + LogTick: no earlier than the warning, no more than LogTick later.
const LogTick = 1000

// Record is one line of the ledger, as JSON. Times are unix microseconds by the clock of the
// process that wrote the record (one host: one clock); Due is unix milliseconds, as the job's
// due time is kept.
type Record struct {
	Kind    Kind   `json:"k"`
	ID      string `json:"id"`
	Attempt int    `json:"a,omitempty"`
	PID     int    `json:"pid,omitempty"`
	At      int64  `json:"t"`
	Due     int64  `json:"due,omitempty"`
	Outcome string `json:"o,omitempty"`
	Expect  string `json:"x,omitempty"`
	Need    int    `json:"n,omitempty"`
	Type    string `json:"ty,omitempty"` // Ack: the job's type, when not JobType
	// Ack of a workflow's task: the job ids of the tasks it waits for, and whether it is a
	// Finally task (it waits for them to be final, not completed).
	After   []string `json:"after,omitempty"`
	Finally bool     `json:"fin,omitempty"`
	// Sum is a payload's Digest. Ack: the payload published (plain jobs of the workload).
	// Start: the payload the handler was handed. Observed, with encryption: the payload
	// stored at the end, as NewKey alone opened it ("" when it did not open).
	Sum string `json:"sum,omitempty"`
	// Observed, with encryption: the key the stored payload and result are sealed under
	// ("plain" for one stored plain, "" for none), and the result's Digest as NewKey alone
	// opened it.
	Key       string `json:"key,omitempty"`
	ResultKey string `json:"rkey,omitempty"`
	ResultSum string `json:"rsum,omitempty"`
}

// The outcomes a record may carry, by kind.
var outcomes = map[Kind][]string{
	Ack:           {""},
	Indeterminate: {""},
	Start:         {""},
	Finish:        {"ok", "error"},
	Commit:        {"completed", "retry", "dead"},
	Observed:      observed(),
	Kill:          {"held", "gone"},
	Stop:          {"held", "gone"},
	Cont:          {""},
	LeaseLost:     {""},
}

// observed are the outcomes of an Observed record: the job's status, or "missing".
func observed() []string {
	out := []string{"missing"}
	for _, s := range status.All() {
		out = append(out, string(s))
	}
	return out
}

// ParseLine reads one ledger line (without its newline). It refuses anything a writer of this
// package would not have written: unknown fields or kinds, a bad job id, negative numbers, an
// outcome foreign to the kind.
func ParseLine(line []byte) (Record, error) {
	var r Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("ledger: %w", err)
	}
	if dec.More() {
		return Record{}, errors.New("ledger: more than one value on a line")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Record{}, errors.New("ledger: trailing data")
	}
	allowed, ok := outcomes[r.Kind]
	switch {
	case !ok:
		return Record{}, fmt.Errorf("ledger: unknown kind %q", r.Kind)
	case !slices.Contains(allowed, r.Outcome):
		return Record{}, fmt.Errorf("ledger: outcome %q is not one of a %s record", r.Outcome, r.Kind)
	case r.Attempt < 0 || r.PID < 0 || r.At < 0 || r.Due < 0 || r.Need < 0:
		return Record{}, errors.New("ledger: negative number")
	case r.Expect != "" && r.Expect != "completed" && r.Expect != "failed" && r.Expect != "canceled":
		return Record{}, fmt.Errorf("ledger: expected status %q", r.Expect)
	case r.Sum != "" && r.Kind != Ack && r.Kind != Start && r.Kind != Observed:
		return Record{}, fmt.Errorf("ledger: a digest on a %s record", r.Kind)
	case (r.Key != "" || r.ResultKey != "" || r.ResultSum != "") && r.Kind != Observed:
		return Record{}, fmt.Errorf("ledger: a stored key or result on a %s record", r.Kind)
	}
	if err := keyspace.ValidateID(r.ID); err != nil {
		return Record{}, fmt.Errorf("ledger: %w", err)
	}
	return r, nil
}

// Writer appends records to one process's ledger file. Each record is one write(2) of one
// whole line to a file opened O_APPEND. So a SIGKILLed writer leaves whole lines only: the
// kernel has them once write returns. The file is fsynced every SyncEvery and at Close, which
// is what a crash of the host would need. Its methods are safe for concurrent use.
type Writer struct {
	mu    sync.Mutex
	f     *os.File
	dirty bool
	err   error
	stop  chan struct{}
	done  chan struct{}
	buf   []byte
	once  sync.Once
	cerr  error
}

// SyncEvery is how often a Writer fsyncs what it wrote since the last sync.
const SyncEvery = 50 * time.Millisecond

// OpenWriter opens (creating) dir/name.jsonl for appending.
func OpenWriter(dir, name string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	w := &Writer{f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go w.syncLoop()
	return w, nil
}

// Write appends r. An error is sticky: the ledger of this process is broken, and the run with
// it.
func (w *Writer) Write(r Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b, err := json.Marshal(r)
	if err != nil {
		w.err = err
		return err
	}
	w.buf = append(append(w.buf[:0], b...), '\n')
	if _, err := w.f.Write(w.buf); err != nil {
		w.err = fmt.Errorf("ledger: %w", err)
		return w.err
	}
	w.dirty = true
	return nil
}

func (w *Writer) syncLoop() {
	defer close(w.done)
	t := time.NewTicker(SyncEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.sync()
		}
	}
}

func (w *Writer) sync() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dirty && w.err == nil {
		if err := w.f.Sync(); err != nil {
			w.err = fmt.Errorf("ledger: %w", err)
		}
		w.dirty = false
	}
}

// Close syncs and closes the file; it returns the first error the writer met. Later calls
// return the same.
func (w *Writer) Close() error {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		w.sync()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.cerr = errors.Join(w.err, w.f.Close())
		if w.err == nil {
			w.err = errors.New("ledger: closed")
		}
	})
	return w.cerr
}

// ReadDir reads every *.jsonl ledger file of dir. A last line without its newline is a torn
// write, from a process killed in the middle of its write(2). Linux does not do that for a
// regular file, but a ledger should not bet on it. A torn line is counted in torn and
// skipped. Any other bad line is an error: a ledger that cannot be read cannot vouch for
// anything.
func ReadDir(dir string) (recs []Record, torn int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(files)
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, 0, fmt.Errorf("ledger: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		n := 0
		for sc.Scan() {
			n++
			line := sc.Bytes()
			if len(strings.TrimSpace(string(line))) == 0 {
				continue
			}
			r, err := ParseLine(line)
			if err != nil {
				if int64(len(data)) > 0 && data[len(data)-1] != '\n' && isLastLine(data, line) {
					torn++
					continue
				}
				return nil, 0, fmt.Errorf("%s:%d: %w", filepath.Base(name), n, err)
			}
			recs = append(recs, r)
		}
		if err := sc.Err(); err != nil {
			return nil, 0, fmt.Errorf("ledger: %s: %w", filepath.Base(name), err)
		}
	}
	return recs, torn, nil
}

// isLastLine reports whether line is the text after the last newline of data.
func isLastLine(data, line []byte) bool {
	i := bytes.LastIndexByte(data, '\n')
	return bytes.Equal(data[i+1:], line)
}
