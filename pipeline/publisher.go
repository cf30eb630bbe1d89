package pipeline

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/stream"
)

// Control keys: metadata keys that a Watermill message may carry to set the options of the job
// it becomes. They are documented here, once, for everything that turns messages into jobs.
// The Publisher reads them, and so does a Worker that adopts a message of another Watermill
// publisher. There a delay counts from the message's stream entry. A unique key held by
// another job drops the message as a duplicate. A bad value sends it to the dead set, with a
// reason naming the key.
//
// The Publisher removes the control keys from the metadata the job keeps. An adopted message
// keeps its metadata as published, control keys included. Every key that starts with
// MetaKeyPrefix is reserved for control keys. One not listed here (say "conveyor_delays") is
// refused rather than kept as metadata, so that a typo never silently drops an option.
//
//	Option          Key                         Value
//	Task.Type       conveyor_type               the job type, 1 to 128 bytes, no spaces.
//	WithDelay       conveyor_delay              a Go duration, at least 0 ("90s", "1h30m").
//	WithRunAt       conveyor_run_at             unix milliseconds, or RFC 3339.
//	WithMaxRetries  conveyor_max_retries        an integer, 0 to 1000.
//	WithTimeout     conveyor_timeout            a Go duration, at least 0 (0: no timeout).
//	WithUnique      conveyor_unique_key         1 to 128 bytes.
//	WithUnique      conveyor_unique_ttl         a Go duration above 0; needs conveyor_unique_key.
//	WithPriority    conveyor_priority           an integer, MinPriority (1) to MaxPriority (4).
//	WithGroup       conveyor_group              a group name, as a job id (1 to 128 bytes).
//	WithLimitKey    conveyor_limit_key          1 to 128 bytes.
//	WithRetention   conveyor_retention          a Go duration, at least 0 (0: delete at the end).
//	WithDebounce    conveyor_debounce_key       1 to 128 bytes; needs the two below.
//	WithDebounce    conveyor_debounce_quiet     a Go duration above 0.
//	WithDebounce    conveyor_debounce_max_wait  a Go duration, at least the quiet.
//
// conveyor_delay and conveyor_run_at exclude each other. A run-at time in the past runs the
// job at once. The three debounce keys go together. They exclude conveyor_delay,
// conveyor_run_at, conveyor_unique_key and conveyor_group, as WithDebounce excludes their
// options. A debounced message's job has its window's id, not the message's UUID.
//
// Priority, group, limit key, retention and debounce are the Publisher's only (publisherOnly).
// A Worker adopting a message of another publisher refuses one that carries them: the entry
// is already in its stream, and adopting it writes none of them. The message goes to the
// dead set, the reason naming the key.
const (
	// MetaKeyPrefix starts every control key; metadata keys with it are reserved.
	MetaKeyPrefix = "conveyor_"
	// MetaKeyType is the job type. Without it, PublisherConfig.DefaultType applies.
	MetaKeyType = "conveyor_type"
	// MetaKeyDelay makes the job due that long after it is published (a Go duration).
	MetaKeyDelay = "conveyor_delay"
	// MetaKeyRunAt makes the job due at a time: unix milliseconds, or RFC 3339.
	MetaKeyRunAt = "conveyor_run_at"
	// MetaKeyMaxRetries is the job's retry count (a decimal integer).
	MetaKeyMaxRetries = "conveyor_max_retries"
	// MetaKeyTimeout bounds each attempt of the job (a Go duration).
	MetaKeyTimeout = "conveyor_timeout"
	// MetaKeyUniqueKey de-duplicates the job, as WithUnique.
	MetaKeyUniqueKey = "conveyor_unique_key"
	// MetaKeyUniqueTTL is how long MetaKeyUniqueKey is held (a Go duration). Defaults to
	// PublisherConfig.UniqueTTL.
	MetaKeyUniqueTTL = "conveyor_unique_ttl"
	// MetaKeyPriority is the job's priority level, as WithPriority (a decimal integer).
	MetaKeyPriority = "conveyor_priority"
	// MetaKeyGroup puts the job in a fair group of its queue, as WithGroup.
	MetaKeyGroup = "conveyor_group"
	// MetaKeyLimitKey is the key the queue's per-key limits count the job under, as
	// WithLimitKey.
	MetaKeyLimitKey = "conveyor_limit_key"
	// MetaKeyRetention is how long the job's record is kept after it ends, as WithRetention
	// (a Go duration).
	MetaKeyRetention = "conveyor_retention"
	// MetaKeyDebounceKey debounces the job, as WithDebounce; it needs MetaKeyDebounceQuiet and
	// MetaKeyDebounceMaxWait.
	MetaKeyDebounceKey = "conveyor_debounce_key"
	// MetaKeyDebounceQuiet is WithDebounce's quiet (a Go duration).
	MetaKeyDebounceQuiet = "conveyor_debounce_quiet"
	// MetaKeyDebounceMaxWait is WithDebounce's maximum wait (a Go duration).
	MetaKeyDebounceMaxWait = "conveyor_debounce_max_wait"
)

// Defaults of PublisherConfig.
const (
	// DefaultUniqueTTL is how long a unique key given without MetaKeyUniqueTTL is held.
	DefaultUniqueTTL = time.Hour
)

// ErrPublisherClosed is returned by Publisher.Publish after Close.
var ErrPublisherClosed = errors.New("pipeline: publisher closed")

// PublisherConfig configures a Publisher. Zero fields take the documented defaults; an
// unusable value makes NewPublisher return an error wrapping ErrInvalid.
type PublisherConfig struct {
	// DefaultType is the job type of a message that carries no MetaKeyType. Zero means none:
	// such a message is refused (and with it the whole Publish call). When set, it must be a
	// valid job type: 1 to 128 bytes, no spaces or control characters.
	DefaultType string
	// UniqueTTL is how long a unique key (MetaKeyUniqueKey) is held when the message gives no
	// MetaKeyUniqueTTL. Defaults to DefaultUniqueTTL (1h); negative is an error.
	UniqueTTL time.Duration
}

func (c PublisherConfig) validate() error {
	var errs []error
	if c.DefaultType != "" {
		if err := validateType(c.DefaultType); err != nil {
			errs = append(errs, fmt.Errorf("PublisherConfig.DefaultType: %w", err))
		}
	}
	if c.UniqueTTL < 0 {
		errs = append(errs, invalid("PublisherConfig.UniqueTTL is %s; it must not be negative (zero means %s)", c.UniqueTTL, DefaultUniqueTTL))
	}
	return errors.Join(errs...)
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	if c.UniqueTTL == 0 {
		c.UniqueTTL = DefaultUniqueTTL
	}
	return c
}

// Publisher is a Watermill message.Publisher that turns messages into Conveyor jobs. So a
// Watermill application (a router handler's output, a Forwarder, an outbox) can hand work to
// Conveyor's workers. It is safe for concurrent use.
//
// Publish(topic, msgs...) enqueues every message as a job of queue topic. The message's UUID
// is the job id, so publishing a message again (a retry, a redelivery upstream) makes no
// second job. A message with the UUID of a job of another type or payload refuses the call
// (ErrConflict). A debounced message (MetaKeyDebounceKey) is the exception: its job has its
// window's id, and publishing it again joins the window again. The payload is the job's
// payload. The metadata is the job's metadata, except the control keys (see MetaKeyPrefix).
// Those are removed and set the job's type and options. A message without MetaKeyType gets
// PublisherConfig.DefaultType.
//
// A call is one round trip to Redis (one Client.EnqueueBatch). Every message is checked before
// anything is written. One invalid message refuses the whole call, and nothing is written.
// Invalid means a bad control value, a UUID that is not a valid job id, or a missing or
// invalid type. So do metadata keys that are empty or start with '_' (reserved), or a payload
// over the client's MaxPayloadBytes. The error names the message by index and UUID, and wraps
// ErrInvalid or ErrPayloadTooLarge. On a Redis error some jobs may have been written;
// publishing the same messages again is safe.
//
// The Redis call runs under the first message's context (Message.Context), since a call is
// one batch. Options of a call rather than of a job have no control key. The client's
// ClientConfig.Replicas is every call's replica wait (WithReplicas). The message's UUID is
// the job's id (WithID).
//
// Tracing: the call is one publish span (see "Tracing" in the README), child of the span of
// the first message's context. A message whose metadata has a W3C traceparent, or whose
// context has a span, is linked from it. With no tracer provider set, a message's traceparent
// reaches the job's handler unchanged (its metadata's, else its context's).
//
// The jobs' stream entries keep watermill-redisstream's layout. So a Watermill subscriber
// (package stream's, or watermill-redisstream's) reading "<prefix>:{<queue>}:stream"
// receives the messages with their UUID, payload and metadata, without the control keys.
type Publisher struct {
	client *Client
	cfg    PublisherConfig

	mu     sync.RWMutex // held for reading by each Publish, for writing by Close
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that enqueues through client. It panics on a nil client
// and returns an error wrapping ErrInvalid for an unusable cfg.
func NewPublisher(client *Client, cfg PublisherConfig) (*Publisher, error) {
	if client == nil {
		panic("pipeline: NewPublisher with a nil Client")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{client: client, cfg: cfg.withDefaults()}, nil
}

// Publish enqueues msgs as jobs of queue topic in one round trip; see Publisher. Publishing no
// message does nothing.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if err := keys.ValidateQueue(topic); err != nil {
		return fmt.Errorf("publish: %w: %w", ErrInvalid, err)
	}
	if len(msgs) == 0 {
		return nil
	}
	tasks := make([]Task, len(msgs))
	for i, msg := range msgs {
		if msg == nil {
			return fmt.Errorf("publish to %s: message %d: %w", topic, i, invalid("nil message"))
		}
		t, err := p.task(msg)
		if err != nil {
			return fmt.Errorf("publish to %s: message %d (uuid %q): %w", topic, i, msg.UUID, err)
		}
		tasks[i] = t
	}
	// EnqueueBatch checks every task again before it writes anything; an input error from it
	// means the checks above missed a rule of the Client's.
	_, err := p.client.EnqueueBatch(msgs[0].Context(), topic, tasks)
	if err != nil && (errors.Is(err, ErrInvalid) || errors.Is(err, ErrPayloadTooLarge)) {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return err
}

// Close makes later Publish calls fail with ErrPublisherClosed, after waiting for those under
// way. It does not close the client or its Redis connection. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

// task turns a message into a task, checking what the Client would refuse, so that the error
// can name the message.
func (p *Publisher) task(msg *message.Message) (Task, error) {
	if err := keys.ValidateID(msg.UUID); err != nil {
		return Task{}, fmt.Errorf("%w: the UUID is not a usable job id: %w", ErrInvalid, err)
	}
	var (
		md   map[string]string
		ctrl = map[string]string{}
	)
	for k, v := range msg.Metadata {
		switch {
		case strings.HasPrefix(k, MetaKeyPrefix):
			if !isControlKey(k) {
				return Task{}, unknownControlKey(k)
			}
			ctrl[k] = v
		case k == "" || k[0] == '_':
			return Task{}, invalid("metadata key %q: keys must be non-empty and not start with '_' (reserved)", k)
		default:
			if md == nil {
				md = make(map[string]string, len(msg.Metadata))
			}
			md[k] = v
		}
	}
	if md[tracing.KeyTraceparent] == "" {
		// A message whose context carries a span (a Watermill handler's, say) carries its
		// trace context, as a message of watermill's OpenTelemetry middleware would.
		if ctx := msg.Context(); trace.SpanContextFromContext(ctx).IsValid() {
			if md == nil {
				md = make(map[string]string, 2)
			}
			tracing.Inject(ctx, md)
		}
	}
	if err := validateMetadata(md); err != nil {
		return Task{}, err
	}
	t := Task{Type: p.cfg.DefaultType, Payload: msg.Payload, Metadata: md}
	opts, o, err := controlOptions(ctrl, &t, p.cfg.UniqueTTL)
	if err != nil {
		return Task{}, err
	}
	if err := p.checkSize(&t); err != nil {
		return Task{}, err
	}
	if !o.hasDebounce {
		// A debounced job's id is its window's, chosen by the window's first publish: a
		// message published again joins the window again, still one job.
		opts = append(opts, WithID(msg.UUID))
	}
	t.Opts = opts
	return t, nil
}

// unknownControlKey is the error of a metadata key that starts with MetaKeyPrefix but is no
// control key.
func unknownControlKey(k string) error {
	return invalid("metadata key %q: unknown control key (keys starting with %q are reserved for Conveyor's control keys)", k, MetaKeyPrefix)
}

func isControlKey(k string) bool {
	switch k {
	case MetaKeyType, MetaKeyDelay, MetaKeyRunAt, MetaKeyMaxRetries, MetaKeyTimeout, MetaKeyUniqueKey, MetaKeyUniqueTTL:
		return true
	}
	return publisherOnly(k)
}

// publisherOnly reports whether k is a control key that only the Publisher reads: a Worker
// adopting another publisher's message cannot apply it, as the entry is already written.
func publisherOnly(k string) bool {
	switch k {
	case MetaKeyPriority, MetaKeyGroup, MetaKeyLimitKey, MetaKeyRetention,
		MetaKeyDebounceKey, MetaKeyDebounceQuiet, MetaKeyDebounceMaxWait:
		return true
	}
	return false
}

// controlOptions reads the control keys ctrl (MetaKeyPrefix) into t's type and options, and
// returns the options also applied, checked as Enqueue checks them. It is the one reading of
// control keys: the Publisher's, and a Worker's for the messages of another publisher it
// adopts. A unique key given without MetaKeyUniqueTTL is held for uniqueTTL.
func controlOptions(ctrl map[string]string, t *Task, uniqueTTL time.Duration) ([]Option, enqueueOptions, error) {
	var o enqueueOptions
	opts, err := readControl(ctrl, t, uniqueTTL)
	if err != nil {
		return nil, o, err
	}
	// Options check their values as they apply; the checks of readControl should leave
	// nothing for them to refuse, but a rule they gain must not slip through unnamed.
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.errs) > 0 {
		return nil, o, errors.Join(o.errs...)
	}
	return opts, o, nil
}

func readControl(ctrl map[string]string, t *Task, uniqueTTL time.Duration) ([]Option, error) {
	bad := func(key, v, format string, args ...any) error {
		return invalid("%s %q: %s", key, v, fmt.Sprintf(format, args...))
	}
	duration := func(key, v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, bad(key, v, "not a Go duration (such as 90s or 1h30m)")
		}
		if d < 0 {
			return 0, bad(key, v, "negative")
		}
		return d, nil
	}
	var opts []Option

	if v, ok := ctrl[MetaKeyType]; ok {
		t.Type = v
		if err := validateType(v); err != nil {
			return nil, fmt.Errorf("%s: %w", MetaKeyType, err)
		}
	} else if t.Type == "" {
		return nil, invalid("no job type: the message has no %s and the publisher no DefaultType", MetaKeyType)
	}

	delay, hasDelay := ctrl[MetaKeyDelay]
	runAt, hasRunAt := ctrl[MetaKeyRunAt]
	switch {
	case hasDelay && hasRunAt:
		return nil, invalid("%s and %s together", MetaKeyDelay, MetaKeyRunAt)
	case hasDelay:
		d, err := duration(MetaKeyDelay, delay)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithDelay(d))
	case hasRunAt:
		at, err := parseRunAt(runAt)
		if err != nil {
			return nil, bad(MetaKeyRunAt, runAt, "%v", err)
		}
		if at.After(MaxRunAt) {
			return nil, bad(MetaKeyRunAt, runAt, "after %s", MaxRunAt.Format(time.RFC3339))
		}
		opts = append(opts, WithRunAt(at))
	}

	if v, ok := ctrl[MetaKeyMaxRetries]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, bad(MetaKeyMaxRetries, v, "not an integer")
		}
		if n < 0 || n > maxMaxRetries {
			return nil, bad(MetaKeyMaxRetries, v, "outside 0..%d", maxMaxRetries)
		}
		opts = append(opts, WithMaxRetries(n))
	}

	if v, ok := ctrl[MetaKeyTimeout]; ok {
		d, err := duration(MetaKeyTimeout, v)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithTimeout(d))
	}

	key, hasKey := ctrl[MetaKeyUniqueKey]
	ttlS, hasTTL := ctrl[MetaKeyUniqueTTL]
	switch {
	case hasTTL && !hasKey:
		return nil, invalid("%s without %s", MetaKeyUniqueTTL, MetaKeyUniqueKey)
	case hasKey:
		if key == "" || len(key) > keys.MaxNameLen {
			return nil, bad(MetaKeyUniqueKey, key, "must be 1 to %d bytes", keys.MaxNameLen)
		}
		if err := validateUniqueKey(key); err != nil {
			return nil, invalid("%s: %s", MetaKeyUniqueKey, reasonOf(err))
		}
		ttl := uniqueTTL
		if hasTTL {
			d, err := duration(MetaKeyUniqueTTL, ttlS)
			if err != nil {
				return nil, err
			}
			if d == 0 {
				return nil, bad(MetaKeyUniqueTTL, ttlS, "must be positive")
			}
			ttl = d
		}
		opts = append(opts, WithUnique(key, ttl))
	}

	if v, ok := ctrl[MetaKeyPriority]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, bad(MetaKeyPriority, v, "not an integer")
		}
		if n < MinPriority || n > MaxPriority {
			return nil, bad(MetaKeyPriority, v, "outside %d (first) to %d", MinPriority, MaxPriority)
		}
		opts = append(opts, WithPriority(n))
	}

	if v, ok := ctrl[MetaKeyGroup]; ok {
		if err := keys.ValidateGroup(v); err != nil {
			return nil, invalid("%s: %v", MetaKeyGroup, err)
		}
		opts = append(opts, WithGroup(v))
	}

	if v, ok := ctrl[MetaKeyLimitKey]; ok {
		if err := validateKeyText("limit key", v); err != nil {
			return nil, invalid("%s: %s", MetaKeyLimitKey, reasonOf(err))
		}
		opts = append(opts, WithLimitKey(v))
	}

	if v, ok := ctrl[MetaKeyRetention]; ok {
		d, err := duration(MetaKeyRetention, v)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithRetention(d))
	}

	dopt, err := readDebounce(ctrl, duration)
	if err != nil {
		return nil, err
	}
	if dopt != nil {
		opts = append(opts, dopt)
	}
	return opts, nil
}

// readDebounce reads the three debounce keys, which go together, into WithDebounce; nil
// without them.
func readDebounce(ctrl map[string]string, duration func(key, v string) (time.Duration, error)) (Option, error) {
	key, hasKey := ctrl[MetaKeyDebounceKey]
	quietS, hasQuiet := ctrl[MetaKeyDebounceQuiet]
	maxS, hasMax := ctrl[MetaKeyDebounceMaxWait]
	switch {
	case !hasKey && !hasQuiet && !hasMax:
		return nil, nil
	case !hasKey:
		return nil, invalid("%s and %s need %s", MetaKeyDebounceQuiet, MetaKeyDebounceMaxWait, MetaKeyDebounceKey)
	case !hasQuiet || !hasMax:
		return nil, invalid("%s needs %s and %s (say \"2s\" and \"1m\")", MetaKeyDebounceKey, MetaKeyDebounceQuiet, MetaKeyDebounceMaxWait)
	}
	if err := validateKeyText("debounce key", key); err != nil {
		return nil, invalid("%s: %s", MetaKeyDebounceKey, reasonOf(err))
	}
	for _, k := range []string{MetaKeyDelay, MetaKeyRunAt, MetaKeyUniqueKey, MetaKeyGroup} {
		if _, ok := ctrl[k]; ok {
			return nil, invalid("%s cannot be combined with %s (as WithDebounce)", MetaKeyDebounceKey, k)
		}
	}
	quiet, err := duration(MetaKeyDebounceQuiet, quietS)
	if err != nil {
		return nil, err
	}
	if quiet == 0 || quiet > maxDebounceWait {
		return nil, invalid("%s %q: outside (0, %s]", MetaKeyDebounceQuiet, quietS, maxDebounceWait)
	}
	maxWait, err := duration(MetaKeyDebounceMaxWait, maxS)
	if err != nil {
		return nil, err
	}
	if maxWait < quiet || maxWait > maxDebounceWait {
		return nil, invalid("%s %q: outside [%s %s, %s]", MetaKeyDebounceMaxWait, maxS, MetaKeyDebounceQuiet, quiet, maxDebounceWait)
	}
	return WithDebounce(key, quiet, maxWait), nil
}

// parseRunAt reads unix milliseconds (digits only) or an RFC 3339 time.
func parseRunAt(v string) (time.Time, error) {
	if v != "" && strings.Trim(v, "0123456789") == "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, errors.New("unix milliseconds out of range")
		}
		return time.UnixMilli(ms), nil
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errors.New("neither unix milliseconds nor an RFC 3339 time")
	}
	return at, nil
}

// checkSize applies the Client's MaxPayloadBytes to the payload plus the encoded metadata.
// The metadata is encoded only when a cheap upper bound of its size does not settle it.
func (p *Publisher) checkSize(t *Task) error {
	limit := p.client.cfg.MaxPayloadBytes
	// msgpack: a map header of at most 5 bytes, a header of at most 5 bytes per string.
	bound := 5
	for k, v := range t.Metadata {
		bound += 10 + len(k) + len(v)
	}
	if len(t.Payload)+bound <= limit {
		return nil
	}
	enc, err := stream.EncodeMetadata(t.Metadata)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if size := len(t.Payload) + len(enc); size > limit {
		return fmt.Errorf("%w: %d bytes of payload and metadata, the limit is %d", ErrPayloadTooLarge, size, limit)
	}
	return nil
}
