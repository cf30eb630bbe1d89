package pipeline

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Limits of a job's metadata. Metadata travels with every attempt (in the stream entry, then in
// the job's hash). It is handed to every handler and Watermill middleware. So it is for trace
// ids and routing hints, not for data, which belongs in the payload.
const (
	// MaxMetadataEntries bounds the pairs of a job's metadata.
	MaxMetadataEntries = 64
	// MaxMetadataBytes bounds the bytes of a job's metadata keys and values together.
	MaxMetadataBytes = 8 << 10
)

// validateType accepts 1 to 128 bytes of UTF-8 with no spaces or control characters. The type
// is the last field of a stream entry's space-separated job field, and it is printed in logs
// and status lines.
func validateType(t string) error {
	if t == "" {
		return invalid("empty job type")
	}
	if len(t) > keys.MaxNameLen {
		return invalid("job type longer than %d bytes", keys.MaxNameLen)
	}
	switch textProblem(t, false) {
	case notUTF8:
		return invalid("job type %q is not valid UTF-8", t)
	case hasControl, hasSpace:
		return invalid("job type %q has a space or control character", t)
	}
	return nil
}

// validateMetadata checks a job's metadata: at most MaxMetadataEntries pairs and
// MaxMetadataBytes of keys and values. Keys are non-empty UTF-8 with no control characters,
// not starting with '_' (reserved). Values are UTF-8, since metadata is shown as JSON, which
// cannot carry other bytes.
func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return invalid("metadata has %d entries, the limit is %d", len(md), MaxMetadataEntries)
	}
	size := 0
	for k, v := range md {
		size += len(k) + len(v)
		if k == "" || k[0] == '_' {
			return invalid("metadata key %q: keys must be non-empty and not start with '_' (reserved)", k)
		}
		switch textProblem(k, true) {
		case notUTF8:
			return invalid("metadata key %q is not valid UTF-8", k)
		case hasControl:
			return invalid("metadata key %q has a control character", k)
		}
		if !utf8.ValidString(v) {
			return invalid("metadata value of key %q is not valid UTF-8", k)
		}
	}
	if size > MaxMetadataBytes {
		return invalid("metadata has %d bytes of keys and values, the limit is %d", size, MaxMetadataBytes)
	}
	return nil
}

// validateUniqueKey checks a WithUnique key: 1 to 128 bytes of UTF-8 with no control
// characters (it is part of a Redis key name, and printed).
func validateUniqueKey(key string) error { return validateKeyText("unique key", key) }

// validateKeyText checks a caller's key that becomes part of a Redis key (a unique key, a
// debounce key): 1 to keys.MaxNameLen bytes of UTF-8 without control characters.
func validateKeyText(what, key string) error {
	if key == "" || len(key) > keys.MaxNameLen {
		return invalid("%s must be 1 to %d bytes", what, keys.MaxNameLen)
	}
	switch textProblem(key, true) {
	case notUTF8:
		return invalid("%s %q is not valid UTF-8", what, key)
	case hasControl:
		return invalid("%s %q has a control character", what, key)
	}
	return nil
}

type textIssue int

const (
	textOK textIssue = iota
	notUTF8
	hasControl
	hasSpace
)

// textProblem reports the first problem of s as a name: invalid UTF-8, a control character
// (C0, DEL or C1) or, unless spaces are allowed, a Unicode space.
func textProblem(s string, spaces bool) textIssue {
	if !utf8.ValidString(s) {
		return notUTF8
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return hasControl
		case !spaces && unicode.IsSpace(r):
			return hasSpace
		}
	}
	return textOK
}

// timeoutMS turns a positive WithTimeout into the whole milliseconds it is stored in, at least
// one: a shorter timeout must not become none.
func timeoutMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(1, d.Milliseconds())
}

// validateJob checks a queue name and a job id for a call that names a job: the id is
// required (check and validate take "" for no id).
func validateJob(queue, id string) error {
	if err := validate(queue, id); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: %w", ErrInvalid, keys.ValidateID(id))
	}
	return nil
}

// checkJob is Client.check for a call that names a job.
func (c *Client) checkJob(queue, id string) error { return validateJob(queue, id) }

// checkJob is Inspector.check for a call that names a job.
func (i *Inspector) checkJob(queue, id string) error { return validateJob(queue, id) }

// Validate checks a publish without making it, as Enqueue checks it before it writes anything.
// It checks the queue name, the task (type, metadata, the size of payload and metadata against
// DefaultMaxPayloadBytes) and the options. The errors wrap ErrInvalid or ErrPayloadTooLarge.
// It is for a publish made later by someone else. Package outbox checks a job when it is
// written to the outbox table, not when the relay sends it. A Client with a larger
// MaxPayloadBytes accepts more than Validate does.
func Validate(queue string, task Task, opts ...Option) error {
	if err := validate(queue, ""); err != nil {
		return err
	}
	c := &Client{cfg: ClientConfig{MaxPayloadBytes: DefaultMaxPayloadBytes, MaxRetries: DefaultMaxRetries}}
	var nj jobstate.NewJob
	_, err := c.prepare(queue, &task, time.Now(), opts, nil, &nj)
	return err
}
