package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
)

// maxJSONLLine bounds a line of 'publish --jsonl': the API's bound on a one-job body (a
// payload at the client's limit and room for the other fields). A longer line is that line's
// error; the lines after it are read as usual.
const maxJSONLLine = api.DefaultMaxBodyBytes

// jsonlLine is a line of 'publish --jsonl' read as a job: its 1-based number, the task (its
// Opts the line's options) and the id the line names ("" for none).
type jsonlLine struct {
	n    int
	task pipeline.Task
	id   string
}

// parseJSONLLine reads one line of 'publish --jsonl' as the JSON body of POST
// /v1/queues/{queue}/jobs (api.DecodeJob): the same fields, the same refusals.
func parseJSONLLine(line []byte) (pipeline.Task, string, error) {
	return api.DecodeJob(line)
}

// jsonlResult is a line of 'publish --jsonl --json': the job a line published, or its error.
type jsonlResult struct {
	Line      int    `json:"line"`
	ID        string `json:"id,omitempty"`
	Created   bool   `json:"created,omitempty"`
	Debounced bool   `json:"debounced,omitempty"`
	Error     string `json:"error,omitempty"`
}

// jsonlFlagsRefused are the publish flags a line carries itself, which --jsonl does not take.
var jsonlFlagsRefused = []string{"type", "payload", "delay", "max-retries", "id", "count", "timeout",
	"unique", "unique-ttl", "limit-key", "group", "priority", "meta", "wait-replicas", "wait-timeout",
	"debounce", "debounce-quiet", "debounce-max-wait"}

// publishJSONL runs 'publish --jsonl': it reads the jobs of pf.jsonl (a file, or - for
// standard input), one a line, and publishes them in batches of publishChunk. A line that is
// not a job, or that Redis refuses (a conflicting id), is reported with its number and
// reason, and the other lines are published all the same; the command then exits 1. A failure
// of Redis itself stops it, saying how many lines were published.
func (a *app) publishJSONL(ctx context.Context, pf *publishFlags) error {
	in := a.stdin
	name := "standard input"
	if pf.jsonl != "-" {
		f, err := os.Open(pf.jsonl)
		if err != nil {
			return usageErrorf("--jsonl: %v", err)
		}
		defer f.Close()
		in, name = f, pf.jsonl
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	out := bufio.NewWriter(a.stdout)
	defer out.Flush()
	p := jsonlPublisher{a: a, c: c, queue: pf.queue, json: pf.asJSON, out: out}
	r := bufio.NewReaderSize(in, 64<<10)
	var batch []jsonlLine
	for n := 1; ; n++ {
		line, rerr := readLine(r, maxJSONLLine)
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, errLineTooLong) {
			return fmt.Errorf("reading %s at line %d: %w", name, n, rerr)
		}
		switch {
		case errors.Is(rerr, errLineTooLong):
			p.fail(n, fmt.Sprintf("the line is over the limit of %d bytes", maxJSONLLine))
		case len(strings.TrimSpace(string(line))) == 0:
			// A blank line (a file's last newline, a separator) is no job.
		default:
			task, id, err := parseJSONLLine(line)
			if err != nil {
				p.fail(n, err.Error())
				break
			}
			batch = append(batch, jsonlLine{n: n, task: task, id: id})
		}
		if len(batch) == publishChunk || (errors.Is(rerr, io.EOF) && len(batch) > 0) {
			if err := p.send(ctx, batch); err != nil {
				_ = p.flush() // what was published before the failure
				return err
			}
			batch = batch[:0]
			if err := p.flush(); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			if err := p.flush(); err != nil {
				return err
			}
			p.lines = n
			if len(line) == 0 && !errors.Is(rerr, errLineTooLong) {
				p.lines-- // the end of the file after its last newline
			}
			break
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if p.published > 0 {
		a.warnPublish(ctx, pf, pf.queue, p.types...)
	}
	fmt.Fprintf(a.stderr, "published %s from %s of %s\n", plural(p.published, "job"), plural(p.lines, "line"), name)
	if p.failed > 0 {
		return fmt.Errorf("%d of %s failed (each is named above)", p.failed, plural(p.lines, "line"))
	}
	return nil
}

// jsonlPublisher publishes the batches of 'publish --jsonl' and reports each line.
type jsonlPublisher struct {
	a     *app
	c     *pipeline.Client
	queue string
	json  bool
	out   io.Writer

	lines, published, failed int
	// types are the job types of the lines published, each once: what publish warnings check.
	types []string
	// pending are the reports of the lines read since the last flush.
	pending []jsonlResult
}

// fail reports line n's error (at the next flush).
func (p *jsonlPublisher) fail(n int, reason string) {
	p.failed++
	p.pending = append(p.pending, jsonlResult{Line: n, Error: reason})
}

// done reports the job of line l (at the next flush).
func (p *jsonlPublisher) done(l jsonlLine, j *pipeline.Job) {
	p.published++
	if !slices.Contains(p.types, l.task.Type) {
		p.types = append(p.types, l.task.Type)
	}
	p.pending = append(p.pending, jsonlResult{Line: l.n, ID: j.ID, Created: !j.Duplicate && !j.Debounced, Debounced: j.Debounced})
}

// flush writes the reports held since the last flush in the order of their lines: with
// --json, one object a line on stdout; else each job's id on stdout and each error on stderr.
func (p *jsonlPublisher) flush() error {
	slices.SortFunc(p.pending, func(x, y jsonlResult) int { return cmp.Compare(x.Line, y.Line) })
	for _, r := range p.pending {
		var err error
		switch {
		case p.json:
			err = writeJSON(p.out, r)
		case r.Error != "":
			fmt.Fprintf(p.a.stderr, "conveyor: line %d: %s\n", r.Line, r.Error)
		default:
			_, err = fmt.Fprintln(p.out, r.ID)
		}
		if err != nil {
			return err
		}
	}
	p.pending = p.pending[:0]
	return nil
}

// send publishes a batch in one EnqueueBatch. The pipeline checks every task before writing.
// So the batch is all or nothing for a task it refuses then (ErrInvalid, ErrPayloadTooLarge).
// Such a batch is sent again a line at a time, to tell the bad lines from the good.
//
// A conflicting id (ErrConflict) refuses only its task, and the others are written. So the
// lines that name an id are sent again alone. That is idempotent for those written (the same
// id, type and payload), and names the conflicting ones. A line without an id cannot
// conflict.
func (p *jsonlPublisher) send(ctx context.Context, batch []jsonlLine) error {
	tasks := make([]pipeline.Task, len(batch))
	for i, l := range batch {
		tasks[i] = l.task
	}
	jobs, err := p.c.EnqueueBatch(ctx, p.queue, tasks)
	switch {
	case err == nil:
		for i, l := range batch {
			p.done(l, jobs[i])
		}
		return nil
	case lineRefused(err) && !errors.Is(err, pipeline.ErrConflict):
		for _, l := range batch {
			if err := p.one(ctx, l, nil); err != nil {
				return err
			}
		}
		return nil
	case errors.Is(err, pipeline.ErrConflict) && len(jobs) == len(batch):
		for i, l := range batch {
			first := jobs[i]
			if l.id == "" {
				p.done(l, first)
				continue
			}
			if err := p.one(ctx, l, first); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("after %s: %w", plural(p.published, "job")+" were published", err)
}

// one publishes line l alone and reports it; first, when not nil, is the job the batch
// returned for it, whose Duplicate is what the report says when the line goes through again.
func (p *jsonlPublisher) one(ctx context.Context, l jsonlLine, first *pipeline.Job) error {
	jobs, err := p.c.EnqueueBatch(ctx, p.queue, []pipeline.Task{l.task})
	switch {
	case err == nil:
		if first != nil && first.ID == jobs[0].ID {
			p.done(l, first)
		} else {
			p.done(l, jobs[0])
		}
		return nil
	case lineRefused(err):
		p.fail(l.n, pipeline.ErrorMessage(err))
		return nil
	}
	return fmt.Errorf("line %d, after %s: %w", l.n, plural(p.published, "job")+" were published", err)
}

// lineRefused reports an error that refuses a line's job for what the line says, not for a
// failure of Redis.
func lineRefused(err error) bool {
	return errors.Is(err, pipeline.ErrInvalid) || errors.Is(err, pipeline.ErrPayloadTooLarge) ||
		errors.Is(err, pipeline.ErrConflict)
}

// errLineTooLong is readLine's error for a line over its limit.
var errLineTooLong = errors.New("line too long")

// readLine reads a line of r without its end ("\n" or "\r\n"). A line over limit bytes is
// skipped to its end and returned as errLineTooLong. At the end of r it returns the last line
// (maybe empty) and io.EOF.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > limit+2 { // room for "\r\n"
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if err == nil {
				return nil, errLineTooLong
			}
			return nil, errors.Join(errLineTooLong, err)
		}
		line = []byte(strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r"))
		if len(line) > limit {
			return nil, errLineTooLong
		}
		return line, err
	}
}
