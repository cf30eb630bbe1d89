package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
)

// DefaultUniqueTTL is how long a unique key is held when the body's unique.ttl is not given (the
// CLI's --unique-ttl default). It is the library's (pipeline.PublisherConfig.UniqueTTL's), so a
// job published through the API and one published by a Watermill Publisher hold their keys
// alike.
const DefaultUniqueTTL = time.Hour

// jobBody is one job of a POST, as the client sends it. Durations are Go duration strings
// ("5s", "1m30s"); run_at is unix milliseconds or an RFC 3339 time (runAtBody).
type jobBody struct {
	Type       string        `json:"type"`
	Payload    payloadBody   `json:"payload"`
	Delay      *string       `json:"delay"`
	RunAt      *runAtBody    `json:"run_at"`
	MaxRetries *int          `json:"max_retries"`
	ID         string        `json:"id"`
	Timeout    *string       `json:"timeout"`
	Unique     *uniqueBody   `json:"unique"`
	Metadata   metadataBody  `json:"metadata"`
	Retention  *string       `json:"retention"`
	Debounce   *debounceBody `json:"debounce"`
	LimitKey   *string       `json:"limit_key"`
	Group      *string       `json:"group"`
	Priority   *int          `json:"priority"`
}

// runAtBody is a job's run_at: unix milliseconds (a JSON integer), or an RFC 3339 time. The time
// is a JSON string such as "2026-12-01T09:00:00Z", or one with an offset. It is read to the
// millisecond and rounded up: never before the time sent.
type runAtBody struct{ ms int64 }

func (r *runAtBody) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return badArg("run_at %q: want unix milliseconds or an RFC 3339 time such as 2026-12-01T09:00:00Z", s)
		}
		r.ms = t.UnixMilli()
		if t.Nanosecond()%int(time.Millisecond) != 0 {
			r.ms++
		}
		return nil
	}
	if err := json.Unmarshal(b, &r.ms); err != nil {
		return badBody("field run_at: want unix milliseconds (an integer) or an RFC 3339 time (a string), got %s", b)
	}
	return nil
}

// debounceBody is a job's debounce (pipeline.WithDebounce): durations as Go duration strings.
type debounceBody struct {
	Key     string `json:"key"`
	Quiet   string `json:"quiet"`
	MaxWait string `json:"max_wait"`
}

type uniqueBody struct {
	Key string `json:"key"`
	TTL string `json:"ttl"`
}

// jobRequest is a decoded, checked job: what Enqueue is called with.
type jobRequest struct {
	task pipeline.Task
	opts []pipeline.Option
}

// requireJSON refuses a body whose Content-Type is not application/json with 415.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		if ct == "" {
			ct = "none"
		}
		return errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			"the body must be JSON with Content-Type: application/json (got %s)", ct)
	}
	return nil
}

// decodeJSON reads exactly one JSON value into v, refusing unknown fields and anything after
// the value. Errors are the client's (400) except a body over its limit (413) and a failed
// read.
func decodeJSON(r io.Reader, v any) error {
	dec := newDecoder(r)
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	return end(dec)
}

// newDecoder decodes r, refusing unknown fields and bytes that are not UTF-8. The package
// encoding/json would replace those with U+FFFD. Then an id, a type or metadata would be stored
// as something the client did not send. It reads r as it goes, so a body costs what its largest
// value does.
func newDecoder(r io.Reader) *json.Decoder {
	dec := json.NewDecoder(&utf8Reader{r: r})
	dec.DisallowUnknownFields()
	return dec
}

// end refuses anything after the body's value.
func end(dec *json.Decoder) error {
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return badBody("the body holds more than one JSON value")
	default:
		return jsonError(err)
	}
}

// utf8Reader passes on the bytes of r while they are UTF-8, and fails at the first byte that is
// not. It holds back the first bytes of a character that the next read completes.
type utf8Reader struct {
	r    io.Reader
	off  int64  // bytes passed on
	pend []byte // the start of a character cut by the last read
	err  error
}

func (u *utf8Reader) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	if len(p) < utf8.UTFMax {
		return 0, io.ErrShortBuffer
	}
	n := copy(p, u.pend)
	m, err := u.r.Read(p[n:])
	n += m
	i := 0
	for i < n {
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		c, size := utf8.DecodeRune(p[i:n])
		if c == utf8.RuneError && size == 1 {
			if !utf8.FullRune(p[i:n]) && err == nil {
				break // cut by the read: the next one completes it
			}
			u.err = badBody("the body is not valid UTF-8 (byte %d): JSON text must be UTF-8", u.off+int64(i))
			u.off += int64(i)
			if i == 0 {
				return 0, u.err
			}
			return i, nil
		}
		i += size
	}
	u.pend = append(u.pend[:0], p[i:n]...)
	u.off += int64(i)
	return i, err
}

// payloadBody is a job's payload as compact JSON text, so a resent job matches however it was
// formatted; nil for null. It is compacted straight from the decoder's buffer: one copy.
type payloadBody []byte

func (p *payloadBody) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("null")) {
		*p = nil
		return nil
	}
	var buf bytes.Buffer
	buf.Grow(len(data))
	if err := json.Compact(&buf, data); err != nil {
		return badBody("payload: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	*p = buf.Bytes()
	return nil
}

// metadataBody is a job's metadata, decoded without building a map of more entries than a job
// may have. A body of a million keys would otherwise cost far more than its bytes.
type metadataBody map[string]string

func (m *metadataBody) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		*m = nil
		return nil
	}
	if tok != json.Delim('{') {
		return &json.UnmarshalTypeError{Value: jsonKind(tok), Type: reflect.TypeFor[map[string]string]()}
	}
	out := metadataBody{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				return &json.UnmarshalTypeError{Value: typ.Value, Type: reflect.TypeFor[map[string]string]()}
			}
			return err
		}
		out[key.(string)] = v
		if len(out) > keys.MaxMetadataEntries {
			return badArg("metadata has at least %d entries, the limit is %d", len(out), keys.MaxMetadataEntries)
		}
	}
	*m = out
	return nil
}

// jsonKind names the JSON kind of a token, as encoding/json's type errors do.
func jsonKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		if tok == json.Delim('[') {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return "number"
}

// taskIndex matches the library's name for a batch's task ("task 3: "); the API says jobs[3],
// the body's own name for it.
var taskIndex = regexp.MustCompile(`(^|\n)task (\d+): `)

// batchError is the answer to a batch the library refused: its message names the jobs as the
// body does.
func batchError(err error) error {
	ae := toAPIError(err)
	if ae.Status >= 500 {
		return err
	}
	out := *ae
	out.Message = taskIndex.ReplaceAllString(ae.Message, "${1}jobs[$2]: ")
	return &out
}

// jsonError turns an encoding/json error into a 400 that says what is wrong and where.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	var ae *apiError
	switch {
	case errors.As(err, &tooBig), errors.As(err, &ae):
		return err
	case errors.Is(err, io.EOF):
		return badBody("the body is empty: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badBody("the body ends in the middle of its JSON")
	case errors.As(err, &syntax):
		return badBody("malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badBody("want a JSON object, got %s", typ.Value)
		}
		return badBody("field %s: want %s, got %s", typ.Field, jsonType(typ.Type.String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badBody("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case strings.HasPrefix(err.Error(), "json: "):
		return badBody("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return err // a failed read: the connection, not the JSON
}

// jsonType names a Go type of a body field as the JSON a client should send.
func jsonType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "map["):
		return "an object of strings"
	case strings.HasPrefix(goType, "[]"), strings.HasSuffix(goType, "RawMessage"):
		return "JSON"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "int"):
		return "an integer"
	}
	return "an object"
}

// decodeJob reads and checks the body of a one-job POST; idemKey is the request's
// Idempotency-Key header (the job's id unless the body names one).
func decodeJob(r io.Reader, idemKey string) (*jobRequest, error) {
	var b jobBody
	if err := decodeJSON(r, &b); err != nil {
		return nil, err
	}
	return b.request(idemKey)
}

// DecodeJob reads one job as POST /v1/queues/{queue}/jobs takes its body, with the same fields
// and checks. Unknown fields, bytes that are not UTF-8 and anything after the object are
// refused. It returns the job as a task whose Opts carry the body's options, and the id the body
// names ("" for none). It is the CLI's reading of a line of 'publish --jsonl', so a line and an
// HTTP body mean the same job. Its errors are the client's, in the API's words.
func DecodeJob(body []byte) (pipeline.Task, string, error) {
	var b jobBody
	if err := decodeJSON(bytes.NewReader(body), &b); err != nil {
		return pipeline.Task{}, "", err
	}
	req, err := b.request("")
	if err != nil {
		return pipeline.Task{}, "", err
	}
	req.task.Opts = req.opts
	return req.task, b.ID, nil
}

// decodeBatch reads and checks the body of a batch POST. With idemKey, a job that names no id
// gets "<idemKey>.<index>", so the whole batch can be sent again safely.
//
// It decodes the array one job at a time, and refuses the job after the MaxBatchJobs'th. So a
// body's cost is bounded by its largest job and the jobs it may hold, whatever it holds. Decoded
// whole, 16 MiB of {} elements took 2 GB.
func decodeBatch(r io.Reader, idemKey string) ([]*jobRequest, error) {
	dec := newDecoder(r)
	tok, err := dec.Token()
	switch {
	case err != nil:
		return nil, jsonError(err)
	case tok == nil:
		return nil, badBody(`want {"jobs":[...]}`)
	case tok != json.Delim('{'):
		return nil, badBody("want a JSON object, got %s", jsonKind(tok))
	}
	var reqs []*jobRequest
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, jsonError(err)
		}
		// encoding/json matches field names case-insensitively, as the one-job body does.
		if !strings.EqualFold(key.(string), "jobs") {
			return nil, badBody("unknown field %q", key)
		}
		// A second "jobs" replaces the first, as encoding/json would.
		if reqs, err = decodeJobs(dec, idemKey); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, jsonError(err)
	}
	if err := end(dec); err != nil {
		return nil, err
	}
	switch {
	case reqs == nil:
		return nil, badBody(`want {"jobs":[...]}`)
	case len(reqs) == 0:
		return nil, badArg("the batch has no jobs")
	}
	return reqs, nil
}

// decodeJobs reads the value of "jobs": an array of at most MaxBatchJobs jobs (a non-nil
// slice), or null (nil).
func decodeJobs(dec *json.Decoder, idemKey string) ([]*jobRequest, error) {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return nil, jsonError(err)
	case tok == nil:
		return nil, nil
	case tok != json.Delim('['):
		return nil, badBody("field jobs: want an array of jobs, got %s", jsonKind(tok))
	}
	reqs := []*jobRequest{}
	for i := 0; dec.More(); i++ {
		if i == MaxBatchJobs {
			return nil, badArg("the batch has at least %d jobs, the limit is %d: split it", i+1, MaxBatchJobs)
		}
		var b jobBody
		if err := dec.Decode(&b); err != nil {
			return nil, jobError(i, jsonError(err))
		}
		key := ""
		if idemKey != "" && b.ID == "" {
			key = fmt.Sprintf("%s.%d", idemKey, i)
		}
		req, err := b.request(key)
		if err != nil {
			return nil, jobError(i, err)
		}
		reqs = append(reqs, req)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, jsonError(err)
	}
	return reqs, nil
}

// jobError names the batch's job i in a refusal of it.
func jobError(i int, err error) error {
	var ae *apiError
	if !errors.As(err, &ae) {
		return err // a failed read or a body over its limit: not the job's
	}
	return &apiError{Status: ae.Status, Code: ae.Code, Message: fmt.Sprintf("jobs[%d]: %s", i, ae.Message)}
}

// request checks a job body and turns it into a task and its options. The pipeline checks the
// rest (the type's characters, the id's, the ranges) when the job is enqueued.
func (b *jobBody) request(idemKey string) (*jobRequest, error) {
	if b.Type == "" {
		return nil, badArg("type is required: it selects the handler")
	}
	req := &jobRequest{task: pipeline.Task{Type: b.Type, Metadata: b.Metadata, Payload: b.Payload}}
	id := b.ID
	if idemKey != "" {
		if id != "" && id != idemKey {
			return nil, badArg("the Idempotency-Key header (%q) and the body's id (%q) differ: send one, or the same", idemKey, id)
		}
		id = idemKey
	}
	if id != "" {
		req.opts = append(req.opts, pipeline.WithID(id))
	}
	if b.Debounce != nil {
		switch {
		case id != "":
			return nil, badArg("debounce with id or an Idempotency-Key header: a debounced job's id is its window's, chosen by the window's first publish")
		case b.Delay != nil || b.RunAt != nil:
			return nil, badArg("debounce with delay or run_at: the debounce window decides when the job runs")
		case b.Unique != nil:
			return nil, badArg("debounce with unique: a debounce key already makes one job of many publishes")
		}
	}
	if b.Delay != nil && b.RunAt != nil {
		return nil, badArg("delay and run_at together: send one")
	}
	if b.Delay != nil {
		d, err := duration("delay", *b.Delay)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, badArg("delay %s is negative", *b.Delay)
		}
		req.opts = append(req.opts, pipeline.WithDelay(d))
	}
	if b.RunAt != nil {
		if b.RunAt.ms <= 0 {
			return nil, badArg("run_at %d: want a time in unix milliseconds (after 1970), or RFC 3339", b.RunAt.ms)
		}
		req.opts = append(req.opts, pipeline.WithRunAt(time.UnixMilli(b.RunAt.ms)))
	}
	if b.MaxRetries != nil {
		req.opts = append(req.opts, pipeline.WithMaxRetries(*b.MaxRetries))
	}
	if b.Timeout != nil {
		d, err := duration("timeout", *b.Timeout)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, badArg("timeout %s is negative", *b.Timeout)
		}
		req.opts = append(req.opts, pipeline.WithTimeout(d))
	}
	if b.Retention != nil {
		d, err := duration("retention", *b.Retention)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, badArg("retention %s is negative", *b.Retention)
		}
		req.opts = append(req.opts, pipeline.WithRetention(d))
	}
	if u := b.Unique; u != nil {
		if u.Key == "" {
			return nil, badArg("unique.key is required with unique")
		}
		ttl := DefaultUniqueTTL
		if u.TTL != "" {
			d, err := duration("unique.ttl", u.TTL)
			if err != nil {
				return nil, err
			}
			if d <= 0 {
				return nil, badArg("unique.ttl %s must be positive", u.TTL)
			}
			ttl = d
		}
		req.opts = append(req.opts, pipeline.WithUnique(u.Key, ttl))
	}
	if d := b.Debounce; d != nil {
		opt, err := d.option()
		if err != nil {
			return nil, err
		}
		req.opts = append(req.opts, opt)
	}
	if b.LimitKey != nil {
		req.opts = append(req.opts, pipeline.WithLimitKey(*b.LimitKey))
	}
	if b.Group != nil {
		req.opts = append(req.opts, pipeline.WithGroup(*b.Group))
	}
	if b.Priority != nil {
		if p := *b.Priority; p < pipeline.MinPriority || p > pipeline.MaxPriority {
			return nil, badArg("priority %d is out of range: levels are %d (served first, the default) to %d", p, pipeline.MinPriority, pipeline.MaxPriority)
		}
		req.opts = append(req.opts, pipeline.WithPriority(*b.Priority))
	}
	return req, nil
}

// option checks a debounce body; the pipeline checks the key's characters and the ranges, and
// refuses it beside id, delay, run_at or unique.
func (d *debounceBody) option() (pipeline.Option, error) {
	if d.Key == "" {
		return nil, badArg("debounce.key is required with debounce")
	}
	if d.Quiet == "" || d.MaxWait == "" {
		return nil, badArg("debounce.quiet and debounce.max_wait are required with debounce (say \"2s\" and \"1m\")")
	}
	quiet, err := duration("debounce.quiet", d.Quiet)
	if err != nil {
		return nil, err
	}
	maxWait, err := duration("debounce.max_wait", d.MaxWait)
	if err != nil {
		return nil, err
	}
	return pipeline.WithDebounce(d.Key, quiet, maxWait), nil
}

// duration parses a Go duration string of field.
func duration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badArg("%s %q is not a duration (say \"5s\", \"1m30s\" or \"2h\")", field, s)
	}
	return d, nil
}
