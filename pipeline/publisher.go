package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/control"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/stream"
)

// Defaults of PublisherConfig.
const (
	// defaultUniqueTTL is how long a unique key given without metakey.UniqueTTL is held.
	defaultUniqueTTL = time.Hour
)

// ErrPublisherClosed is returned by Publisher.Publish after Close.
var ErrPublisherClosed = errors.New("pipeline: publisher closed")

// PublisherConfig configures a Publisher. Zero fields take the documented defaults; an
// unusable value makes NewPublisher return an error wrapping ErrInvalid.
type PublisherConfig struct {
	// DefaultType is the job type of a message that carries no metakey.Type. Zero means none:
	// such a message is refused (and with it the whole Publish call). When set, it must be a
	// valid job type: 1 to 128 bytes, no spaces or control characters.
	DefaultType string
	// UniqueTTL is how long a unique key (metakey.UniqueKey) is held when the message gives no
	// metakey.UniqueTTL. Defaults to 1h; negative is an error.
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
		errs = append(errs, invalid("PublisherConfig.UniqueTTL is %s; it must not be negative (zero means %s)", c.UniqueTTL, defaultUniqueTTL))
	}
	return errors.Join(errs...)
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	if c.UniqueTTL == 0 {
		c.UniqueTTL = defaultUniqueTTL
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
// (ErrConflict). A debounced message (metakey.DebounceKey) is the exception: its job has its
// window's id, and publishing it again joins the window again. The payload is the job's
// payload. The metadata is the job's metadata, except the control keys (package metakey).
// Those are removed and set the job's type and options. A message without metakey.Type gets
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
// message does nothing. A bounded queue at its bound refuses messages with ErrQueueFull
// (QueueFullErrors says which, RetryAfter when to try again): the others were written, and
// publishing all of them again is safe, since each message's UUID is its job's id.
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
		case strings.HasPrefix(k, metakey.Prefix):
			if !control.IsKey(k) {
				return Task{}, invalidIf(control.UnknownKey(k))
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

// controlOptions reads the control keys ctrl (metakey.Prefix) into t's type and options, and
// returns the options also applied, checked as Enqueue checks them. The Publisher and a
// Worker adopting another publisher's message both read them here, through control.Read.
// t.Type is the default type. A unique key given without metakey.UniqueTTL is held for
// uniqueTTL.
func controlOptions(ctrl map[string]string, t *Task, uniqueTTL time.Duration) ([]Option, enqueueOptions, error) {
	var o enqueueOptions
	v, err := control.Read(ctrl, t.Type)
	if te, ok := errors.AsType[*control.TypeError](err); ok {
		// The type's error is the Client's, so its key comes before ErrInvalid's words.
		return nil, o, fmt.Errorf("%s: %w", metakey.Type, invalidIf(te.Err))
	} else if err != nil {
		return nil, o, invalidIf(err)
	}
	t.Type = v.Type
	opts := controlOpts(v, uniqueTTL)
	// Options check their values as they apply; the checks of control.Read should leave
	// nothing for them to refuse, but a rule they gain must not slip through unnamed.
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.errs) > 0 {
		return nil, o, errors.Join(o.errs...)
	}
	return opts, o, nil
}

// controlOpts is the options of what the control keys set, in the order control.Read reads
// them. An option checks its value only when applied, so building the unused ones is free.
func controlOpts(v control.Values, uniqueTTL time.Duration) []Option {
	var opts []Option
	for _, c := range []struct {
		given bool
		opt   Option
	}{
		{v.HasDelay, WithDelay(v.Delay)},
		{v.HasRunAt, WithRunAt(v.RunAt)},
		{v.HasMaxRetries, WithMaxRetries(v.MaxRetries)},
		{v.HasTimeout, WithTimeout(v.Timeout)},
		{v.UniqueKey != "", WithUnique(v.UniqueKey, cmp.Or(v.UniqueTTL, uniqueTTL))},
		{v.Priority != 0, WithPriority(v.Priority)},
		{v.Group != "", WithGroup(v.Group)},
		{v.LimitKey != "", WithLimitKey(v.LimitKey)},
		{v.HasRetention, WithRetention(v.Retention)},
		{v.DebounceKey != "", WithDebounce(v.DebounceKey, v.DebounceQuiet, v.DebounceMaxWait)},
	} {
		if c.given {
			opts = append(opts, c.opt)
		}
	}
	return opts
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
