package pipeline

import (
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// Limits of a job's metadata. Metadata travels with every attempt (in the stream entry, then in
// the job's hash). It is handed to every handler and Watermill middleware. So it is for trace
// ids and routing hints, not for data, which belongs in the payload.
const (
	// maxMetadataEntries bounds the pairs of a job's metadata.
	maxMetadataEntries = keys.MaxMetadataEntries
	// maxMetadataBytes bounds the bytes of a job's metadata keys and values together.
	maxMetadataBytes = keys.MaxMetadataBytes
)

// The checks of a job's text are internal/keys'; each error wraps ErrInvalid here.

// validateType checks a job type (keys.ValidateType).
func validateType(t string) error { return invalidIf(keys.ValidateType(t)) }

// validateMetadata checks a job's metadata (keys.ValidateMetadata).
func validateMetadata(md map[string]string) error { return invalidIf(keys.ValidateMetadata(md)) }

// validateUniqueKey checks a WithUnique key (keys.ValidateKeyText).
func validateUniqueKey(key string) error { return validateKeyText("unique key", key) }

// validateKeyText checks a caller's key that becomes part of a Redis key (keys.ValidateKeyText).
func validateKeyText(what, key string) error { return invalidIf(keys.ValidateKeyText(what, key)) }

// invalidIf wraps a non-nil err in ErrInvalid.
func invalidIf(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
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
// 1 MiB, a Client's default limit) and the options. The errors wrap ErrInvalid or ErrPayloadTooLarge.
// It is for a publish made later by someone else. Package outbox checks a job when it is
// written to the outbox table, not when the relay sends it. A Client with a larger
// MaxPayloadBytes accepts more than Validate does.
func Validate(queue string, task Task, opts ...Option) error {
	if err := validate(queue, ""); err != nil {
		return err
	}
	c := &Client{cfg: ClientConfig{MaxPayloadBytes: defaultMaxPayloadBytes, MaxRetries: defaultMaxRetries}}
	var nj jobstate.NewJob
	_, err := c.prepare(queue, &task, time.Now(), opts, nil, &nj)
	return err
}
