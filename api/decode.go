package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor/pipeline"
)

// DefaultUniqueTTL is how long a unique key is held when the body's unique.ttl is not given
// (the CLI's --unique-ttl default).
const DefaultUniqueTTL = time.Hour

// jobBody is one job of a POST, as the client sends it. Durations are Go duration strings
// ("5s", "1m30s"); run_at is unix milliseconds.
type jobBody struct {
	Type       string            `json:"type"`
	Payload    json.RawMessage   `json:"payload"`
	Delay      *string           `json:"delay"`
	RunAt      *int64            `json:"run_at"`
	MaxRetries *int              `json:"max_retries"`
	ID         string            `json:"id"`
	Timeout    *string           `json:"timeout"`
	Unique     *uniqueBody       `json:"unique"`
	Metadata   map[string]string `json:"metadata"`
	Retention  *string           `json:"retention"`
}

type uniqueBody struct {
	Key string `json:"key"`
	TTL string `json:"ttl"`
}

// batchBody is the body of a batch POST.
type batchBody struct {
	Jobs []jobBody `json:"jobs"`
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
	// JSON text is UTF-8; encoding/json would replace other bytes with U+FFFD, so an id, a
	// type or metadata would be stored as something the client did not send. The body is
	// bounded by the handler's MaxBytesReader, so reading it whole costs no more than decoding.
	data, err := io.ReadAll(r)
	if err != nil {
		return jsonError(err)
	}
	if i := invalidUTF8(data); i >= 0 {
		return badBody("the body is not valid UTF-8 (byte %d): JSON text must be UTF-8", i)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return badBody("the body holds more than one JSON value")
	default:
		return jsonError(err)
	}
}

// invalidUTF8 returns the offset of the first byte of b that is not UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
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
	switch {
	case errors.As(err, &tooBig):
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

// decodeBatch reads and checks the body of a batch POST. With idemKey, a job that names no
// id gets "<idemKey>.<index>", so the whole batch can be sent again safely.
func decodeBatch(r io.Reader, idemKey string) ([]*jobRequest, error) {
	var b batchBody
	if err := decodeJSON(r, &b); err != nil {
		return nil, err
	}
	switch {
	case b.Jobs == nil:
		return nil, badBody(`want {"jobs":[...]}`)
	case len(b.Jobs) == 0:
		return nil, badArg("the batch has no jobs")
	case len(b.Jobs) > MaxBatchJobs:
		return nil, badArg("the batch has %d jobs, more than the limit of %d: split it", len(b.Jobs), MaxBatchJobs)
	}
	reqs := make([]*jobRequest, len(b.Jobs))
	for i := range b.Jobs {
		key := ""
		if idemKey != "" && b.Jobs[i].ID == "" {
			key = fmt.Sprintf("%s.%d", idemKey, i)
		}
		req, err := b.Jobs[i].request(key)
		if err != nil {
			ae := toAPIError(err)
			return nil, &apiError{Status: ae.Status, Code: ae.Code, Message: fmt.Sprintf("jobs[%d]: %s", i, ae.Message)}
		}
		reqs[i] = req
	}
	return reqs, nil
}

// request checks a job body and turns it into a task and its options. The pipeline checks the
// rest (the type's characters, the id's, the ranges) when the job is enqueued.
func (b *jobBody) request(idemKey string) (*jobRequest, error) {
	if b.Type == "" {
		return nil, badArg("type is required: it selects the handler")
	}
	req := &jobRequest{task: pipeline.Task{Type: b.Type, Metadata: b.Metadata}}
	if p := bytes.TrimSpace(b.Payload); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		// Stored as compact JSON text, so a resent job matches however it was formatted.
		var buf bytes.Buffer
		if err := json.Compact(&buf, p); err != nil {
			return nil, badBody("payload: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		req.task.Payload = buf.Bytes()
	}
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
		if *b.RunAt <= 0 {
			return nil, badArg("run_at %d: want a time in unix milliseconds", *b.RunAt)
		}
		req.opts = append(req.opts, pipeline.WithRunAt(time.UnixMilli(*b.RunAt)))
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
	return req, nil
}

// duration parses a Go duration string of field.
func duration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badArg("%s %q is not a duration (say \"5s\", \"1m30s\" or \"2h\")", field, s)
	}
	return d, nil
}
