package stream

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultConcurrency     = 100
	DefaultBatchSize       = 100
	DefaultBlockTime       = 250 * time.Millisecond
	DefaultLeaseInterval   = 10 * time.Second
	DefaultAckInterval     = 2 * time.Millisecond
	DefaultNackResendSleep = time.Second
	DefaultCloseTimeout    = 30 * time.Second
)

var (
	// ErrClosed is the cause of a message context cancelled because the subscription closed
	// before the message was acked within CloseTimeout.
	ErrClosed = errors.New("stream: subscriber closed")
	// ErrLeaseLost is the cause of a message context cancelled because its entry is no longer
	// pending for this consumer: it was recovered or deleted elsewhere.
	ErrLeaseLost = errors.New("stream: lease lost")
)

// Config configures a Subscriber.
//
// Every field has one meaning per value: zero means the documented default; a negative or
// otherwise unusable value (a BlockTime under a millisecond, which Redis would read as "block
// forever") makes NewSubscriber return an error; and a feature is turned off by a boolean field
// of its own (DisableLeaseRenewal), never by a special value of another field.
type Config struct {
	// Client is the Redis client (standalone, cluster or failover). Required. Close does not
	// close it.
	Client redis.UniversalClient
	// Group is the consumer group; it is created (MKSTREAM, from the first entry) on Subscribe.
	// Required.
	Group string
	// Consumer names this subscriber in the group. Defaults to hostname-pid-random. Two live
	// subscribers must not share a name.
	Consumer string
	// Unmarshaller turns entries into messages. Defaults to DefaultUnmarshaller.
	Unmarshaller Unmarshaller
	// Concurrency bounds the entries read and not yet settled (acked, or with ManualSettle
	// passed to Settle), across all topics: the number of handlers a router runs at once. It
	// is a hard bound: a reader reserves its slots before each XREADGROUP (COUNT is what it
	// reserved) and gives back what the read did not use. A topic whose last read found
	// nothing reserves one slot while its read blocks, and readers waiting for slots are
	// served in turn, so no topic starves another. Defaults to DefaultConcurrency.
	Concurrency int
	// BatchSize bounds the COUNT of one XREADGROUP. Defaults to DefaultBatchSize.
	BatchSize int
	// BlockTime is how long one XREADGROUP waits for new entries, at least a millisecond. It
	// bounds how long a closing subscription waits for its last read. Defaults to
	// DefaultBlockTime.
	BlockTime time.Duration
	// LeaseInterval is how often the leases of held entries are renewed; it must be well under
	// the idle time after which the application recovers entries (a third of it is usual).
	// Defaults to DefaultLeaseInterval.
	LeaseInterval time.Duration
	// DisableLeaseRenewal turns lease renewal off: held entries go idle, and a recoverer may
	// take them from a live handler.
	DisableLeaseRenewal bool
	// DeferAck leaves acknowledgement to the application: a message's Ack then only frees its
	// slot, and the entry stays pending until the application XACKs it.
	DeferAck bool
	// ManualSettle (which implies DeferAck) replaces watching each message's Ack and Nack with
	// an explicit call: the application calls Settle once it is done with a message, which
	// frees its slot and ends its lease renewal; Ack and Nack do nothing, and nothing is handed
	// out again. It spares a goroutine per message in flight, and a hand-off per message.
	ManualSettle bool
	// AckInterval is how long acks are collected before one XACK sends them. Defaults to
	// DefaultAckInterval.
	AckInterval time.Duration
	// NackResendSleep is how long a nacked message waits before it is handed out again.
	// Defaults to DefaultNackResendSleep.
	NackResendSleep time.Duration
	// CloseTimeout is how long a closing subscription waits for handed-out messages to be
	// acked before it cancels their contexts. Defaults to DefaultCloseTimeout.
	CloseTimeout time.Duration
	// OnRelease, when set, receives the entries a closing subscription still holds (read but
	// never acked: not yet handed out, or still running after CloseTimeout), for example to put
	// them back at once. Without it they stay pending for the application's recovery.
	OnRelease func(ctx context.Context, stream string, ids []string)
	// Logger defaults to a no-op logger.
	Logger watermill.LoggerAdapter
}

// DefaultConsumer returns a consumer name unique to this process: hostname-pid-random.
func DefaultConsumer() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), watermill.NewShortUUID()[:6])
}

func (c Config) withDefaults() Config {
	if c.ManualSettle {
		c.DeferAck = true
	}
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer()
	}
	if c.Unmarshaller == nil {
		c.Unmarshaller = DefaultUnmarshaller{}
	}
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.BlockTime = cmp.Or(c.BlockTime, DefaultBlockTime)
	c.LeaseInterval = cmp.Or(c.LeaseInterval, DefaultLeaseInterval)
	c.AckInterval = cmp.Or(c.AckInterval, DefaultAckInterval)
	c.NackResendSleep = cmp.Or(c.NackResendSleep, DefaultNackResendSleep)
	c.CloseTimeout = cmp.Or(c.CloseTimeout, DefaultCloseTimeout)
	if c.Logger == nil {
		c.Logger = watermill.NopLogger{}
	}
	return c
}

// validate checks cfg as given, before withDefaults (which makes zero values positive).
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("stream: "+format, args...)) }
	if c.Client == nil {
		bad("Config.Client is nil")
	}
	if c.Group == "" {
		bad("Config.Group is empty")
	}
	if c.Concurrency < 0 {
		bad("Config.Concurrency is %d; it must be positive (zero means %d)", c.Concurrency, DefaultConcurrency)
	}
	if c.BatchSize < 0 {
		bad("Config.BatchSize is %d; it must be positive (zero means %d)", c.BatchSize, DefaultBatchSize)
	}
	if c.BlockTime < 0 || c.BlockTime > 0 && c.BlockTime < time.Millisecond {
		// Redis takes BLOCK in whole milliseconds, and BLOCK 0 waits forever.
		bad("Config.BlockTime is %v; it must be at least 1ms (zero means %v)", c.BlockTime, DefaultBlockTime)
	}
	for _, d := range []struct {
		name  string
		v, df time.Duration
	}{
		{"LeaseInterval", c.LeaseInterval, DefaultLeaseInterval},
		{"AckInterval", c.AckInterval, DefaultAckInterval},
		{"NackResendSleep", c.NackResendSleep, DefaultNackResendSleep},
		{"CloseTimeout", c.CloseTimeout, DefaultCloseTimeout},
	} {
		if d.v < 0 {
			bad("Config.%s is %v; it must not be negative (zero means %v)", d.name, d.v, d.df)
		}
	}
	return errors.Join(errs...)
}

// Subscriber reads Redis Streams in a consumer group and implements message.Subscriber.
type Subscriber struct {
	cfg    Config
	rdb    redis.UniversalClient
	logger watermill.LoggerAdapter

	mu     sync.Mutex
	closed bool
	topics []*topic
	// Slots (see reserve): taken is how many are reserved for reads or held by entries read
	// and not settled, across topics; never more than Config.Concurrency.
	taken  int
	queue  []*waiter // readers waiting for slots, first come first served
	turn   *waiter   // the reader woken to take slots next; nobody else takes any meanwhile
	paused bool      // no slot is given for a read (see Pause)

	closing  chan struct{}
	wg       sync.WaitGroup // topic goroutines and the lease renewer
	leaseRun sync.Once
}

// NewSubscriber returns a Subscriber; it reads nothing until Subscribe.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Subscriber{
		cfg:     cfg,
		rdb:     cfg.Client,
		logger:  cfg.Logger.With(watermill.LogFields{"consumer": cfg.Consumer}),
		closing: make(chan struct{}),
	}, nil
}

// Consumer is the subscriber's consumer name in the group.
func (s *Subscriber) Consumer() string { return s.cfg.Consumer }

// Subscribe starts reading topic (a stream key) and returns its messages. The channel closes
// after ctx ends or Close is called, once the subscription has shut down (see the package doc).
func (s *Subscriber) Subscribe(ctx context.Context, topicName string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.mu.Unlock()

	err := s.rdb.XGroupCreateMkStream(ctx, topicName, s.cfg.Group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return nil, fmt.Errorf("create group %s on %s: %w", s.cfg.Group, topicName, err)
	}

	t := &topic{
		s:        s,
		name:     topicName,
		out:      make(chan *message.Message),
		held:     make(map[string]*delivery),
		stopping: make(chan struct{}),
		abandon:  make(chan struct{}),
		readDone: make(chan struct{}),
		settled:  make(chan struct{}, 1),
		logger:   s.logger.With(watermill.LogFields{"topic": topicName}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.topics = append(s.topics, t)
	s.wg.Add(1)
	s.mu.Unlock()

	if !s.cfg.DisableLeaseRenewal {
		s.leaseRun.Do(func() {
			s.wg.Add(1)
			go s.renewLeases()
		})
	}
	go t.run(ctx)
	return t.out, nil
}

// Close stops every subscription (see the package doc) and waits for them. It does not close
// the Redis client. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Pause stops reading: no XREADGROUP is issued on any topic until Resume. A read already under
// way may finish, and its messages are handed out as usual. Everything else goes on: held
// messages keep their leases renewed, settle and free their slots, and Close or the end of a
// subscription's context shut down as promptly as ever. Pause and Resume may be called any
// number of times, from any goroutine; the last call wins.
func (s *Subscriber) Pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// Resume undoes Pause.
func (s *Subscriber) Resume() {
	s.mu.Lock()
	s.paused = false
	s.wakeLocked()
	s.mu.Unlock()
}

// waiter is a reader waiting for slots; ready closes when its turn comes.
type waiter struct{ ready chan struct{} }

// reserve takes up to want slots for a read (at least one), waiting while none is free, and
// returns how many it took; the reader gives back what it does not use. Readers that must wait
// are served in turn (first come, first served): when slots free up, the first waiter is woken
// and takes what is free then (up to its want), then the next is woken if any slot is left.
// Taking what is free when the reader runs, not when it is woken, keeps batches large. A
// reader that is not waiting in line never takes slots ahead of those that are. While the
// Subscriber is paused, every reader waits. reserve returns 0 when stop closes.
func (s *Subscriber) reserve(w *waiter, stop <-chan struct{}, want int) int {
	s.mu.Lock()
	for {
		if free := s.cfg.Concurrency - s.taken; free > 0 && !s.paused && (s.turn == w || s.turn == nil && len(s.queue) == 0) {
			n := min(free, want)
			s.taken += n
			if s.turn == w {
				s.turn = nil
				s.wakeLocked()
			}
			s.mu.Unlock()
			return n
		}
		w.ready = make(chan struct{})
		if s.turn == w { // woken, but paused since: first in line again
			s.turn = nil
			s.queue = slices.Insert(s.queue, 0, w)
		} else {
			s.queue = append(s.queue, w)
		}
		s.mu.Unlock()
		select {
		case <-w.ready:
			s.mu.Lock()
		case <-stop:
			s.mu.Lock()
			if s.turn == w {
				s.turn = nil
				s.wakeLocked()
			} else if i := slices.Index(s.queue, w); i >= 0 {
				s.queue = slices.Delete(s.queue, i, i+1)
			}
			s.mu.Unlock()
			return 0
		}
	}
}

// release gives back n slots.
func (s *Subscriber) release(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.taken -= n
	s.wakeLocked()
	s.mu.Unlock()
}

// wakeLocked wakes the first waiting reader when a slot is free, reading is not paused and no
// other reader's turn is pending.
func (s *Subscriber) wakeLocked() {
	if s.turn != nil || len(s.queue) == 0 || s.taken >= s.cfg.Concurrency || s.paused {
		return
	}
	s.turn = s.queue[0]
	s.queue = slices.Delete(s.queue, 0, 1)
	close(s.turn.ready)
}

// forget drops an ended subscription, so the lease renewer and memory do not keep it.
func (s *Subscriber) forget(t *topic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.topics, t); i >= 0 {
		s.topics = slices.Delete(s.topics, i, i+1)
	}
}

// renewLeases re-claims every held entry for this consumer each LeaseInterval (renew.lua: XCLAIM
// with min-idle 0 and JUSTID, which resets the idle time and keeps the delivery count, of the
// entries still pending for this consumer). An entry missing from the reply is no longer pending
// here, nor is any when the group or the stream is gone (NOGROUP); such a message's context is
// cancelled with ErrLeaseLost. Any other error leaves the leases to the next interval.
func (s *Subscriber) renewLeases() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.LeaseInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		topics := append([]*topic(nil), s.topics...)
		s.mu.Unlock()
		for _, t := range topics {
			t.renew()
		}
	}
}

// topic is one subscription.
type topic struct {
	s      *Subscriber
	name   string
	out    chan *message.Message
	logger watermill.LoggerAdapter

	mu   sync.Mutex
	held map[string]*delivery // read and not settled
	acks []string             // acked, waiting for the next XACK

	stopping chan struct{} // closed when the subscription starts shutting down
	abandon  chan struct{} // closed when CloseTimeout passed: stop waiting for acks
	readDone chan struct{}
	settled  chan struct{} // signalled when a handed-out message settles
	inflight sync.WaitGroup
}

type delivery struct {
	id        string
	msg       *message.Message
	ctx       entryContext // the message's context
	cancel    context.CancelCauseFunc
	delivered bool // handed to the output channel at least once
	lost      bool // lease lost: no longer ours to release
}

func (t *topic) run(ctx context.Context) {
	defer t.s.wg.Done()
	// Messages outlive the subscription's context (a closing subscription lets them finish), and
	// each has its own cancel. Their parent must not be cancelable: every child of a cancelable
	// context is registered in, and on cancel removed from, a mutex-guarded map of its parent,
	// which cost about a tenth of the worker's CPU per message.
	go t.read(context.WithoutCancel(ctx))
	ackDone := make(chan struct{})
	if !t.s.cfg.DeferAck {
		go t.ackLoop(ackDone)
	} else {
		close(ackDone)
	}

	select {
	case <-ctx.Done():
	case <-t.s.closing:
	}
	close(t.stopping)
	<-t.readDone

	// Wait for handed-out messages to settle, up to CloseTimeout.
	deadline := time.NewTimer(t.s.cfg.CloseTimeout)
	defer deadline.Stop()
wait:
	for t.running() > 0 {
		select {
		case <-t.settled:
		case <-deadline.C:
			break wait
		}
	}
	close(t.abandon)
	// Every deliver goroutine returns promptly once abandon is closed; waiting for them makes
	// the held set final, so an entry is either acked or released, never both.
	t.inflight.Wait()

	t.mu.Lock()
	var release []string
	left := len(t.held)
	for id, d := range t.held {
		if !d.lost {
			release = append(release, id)
		}
		if d.delivered {
			d.cancel(ErrClosed)
		}
	}
	t.held = map[string]*delivery{}
	t.mu.Unlock()
	t.s.release(left)

	if len(release) > 0 && t.s.cfg.OnRelease != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.s.cfg.OnRelease(rctx, t.name, release)
		cancel()
	}
	<-ackDone
	t.flushAcks(context.Background())
	t.s.forget(t)
	close(t.out)
}

// running counts handed-out messages not yet settled.
func (t *topic) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, d := range t.held {
		if d.delivered {
			n++
		}
	}
	return n
}

func (t *topic) read(ctx context.Context) {
	defer close(t.readDone)
	cfg := t.s.cfg
	backoff := 100 * time.Millisecond
	var w waiter
	// A topic whose last read found nothing waits for entries with one slot reserved, so that
	// a blocked read does not keep slots from busy topics. A new subscription starts so.
	idle := true
	for {
		want := cfg.BatchSize
		if idle {
			want = 1
		}
		n := t.s.reserve(&w, t.stopping, want)
		if n == 0 {
			return
		}
		res, err := t.s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group:    cfg.Group,
			Consumer: cfg.Consumer,
			Streams:  []string{t.name, ">"},
			Count:    int64(n),
			Block:    cfg.BlockTime,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.s.release(n)
			if redis.HasErrorPrefix(err, "NOGROUP") {
				// The stream or group was deleted under us: make them again and go on.
				err = t.s.rdb.XGroupCreateMkStream(ctx, t.name, cfg.Group, "0").Err()
				if err == nil || redis.HasErrorPrefix(err, "BUSYGROUP") {
					continue
				}
			}
			t.logger.Error("read stream", err, nil)
			select {
			case <-t.stopping:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		idle = len(res) == 0 || len(res[0].Messages) == 0
		if idle {
			t.s.release(n)
			select {
			case <-t.stopping:
				return
			default:
				continue
			}
		}
		msgs := res[0].Messages
		stopping := false
		select {
		case <-t.stopping:
			stopping = true
		default:
		}
		fresh := make([]*delivery, 0, len(msgs))
		t.mu.Lock()
		before := len(t.held)
		for i := range msgs {
			x := &msgs[i]
			if _, dup := t.held[x.ID]; dup {
				// Read again while held: the group's read position moved back (XGROUP SETID, a
				// group made again from "0", a restore or failover to older data). The held
				// copy goes on, lease and all; this one is not handed out.
				continue
			}
			msg := cfg.Unmarshaller.Unmarshal(t.name, x.ID, x.Values)
			mctx, cancel := context.WithCancelCause(ctx)
			d := &delivery{id: x.ID, msg: msg, ctx: entryContext{mctx, x.Values}, cancel: cancel}
			msg.SetContext(&d.ctx)
			t.held[x.ID] = d
			if !stopping {
				if !cfg.ManualSettle {
					t.inflight.Add(1)
				}
				fresh = append(fresh, d)
			}
		}
		added := len(t.held) - before
		t.mu.Unlock()
		t.s.release(n - added) // what the read did not use, or found held already
		if cfg.ManualSettle {
			// No goroutine waits on the message: hand it to the router here. The router
			// takes each message at once (it runs each on a goroutine of its own).
			for _, d := range fresh {
				if !t.handOut(d) {
					return // the rest stay held and are released at shutdown
				}
			}
			continue
		}
		// One goroutine per message waits for its ack or nack (the router runs each message on
		// a goroutine of its own as well); one that finds the subscription stopping hands
		// nothing out, and its entry is released at shutdown.
		for _, d := range fresh {
			go t.deliver(d)
		}
		if stopping {
			return
		}
	}
}

// handOut sends d's message to the router unless the subscription is stopping, and reports
// whether it did.
func (t *topic) handOut(d *delivery) bool {
	// A select between a ready reader and a closed stopping picks at random: check first, so
	// nothing is handed out once shutdown has begun.
	select {
	case <-t.stopping:
		return false
	default:
	}
	// Marked before the send: the handler may settle it before the send returns here.
	t.mu.Lock()
	d.delivered = true
	t.mu.Unlock()
	select {
	case t.out <- d.msg:
		return true
	case <-t.stopping:
		t.unhand(d)
		return false
	}
}

// Settle tells a ManualSettle subscriber that the application is done with msg: its slot is
// freed and its lease is no longer renewed. The entry stays pending until the application
// acknowledges it. Only msg itself is settled, never another message made from the same entry:
// settling a message twice, one that shutdown already released, or one that is not the
// subscriber's copy does nothing.
func (s *Subscriber) Settle(msg *message.Message) {
	name, id := msg.Metadata[StreamKey], msg.Metadata[EntryIDKey]
	// The same stream may have two subscriptions for a while (one closing, its successor
	// running): settle in the one that holds the entry.
	var buf [2]*topic
	same := buf[:0]
	s.mu.Lock()
	for _, c := range s.topics {
		if c.name == name {
			same = append(same, c)
		}
	}
	s.mu.Unlock()
	for _, t := range same {
		t.mu.Lock()
		d := t.held[id]
		t.mu.Unlock()
		if d != nil && d.msg == msg {
			t.settle(d, false)
			return
		}
	}
}

// deliver hands one message out and waits for it to settle; a nack hands it out again.
func (t *topic) deliver(d *delivery) {
	defer t.inflight.Done()
	msg := d.msg
	for {
		if !t.handOut(d) {
			return // released at shutdown
		}
		select {
		case <-msg.Acked():
			t.settle(d, true)
			return
		case <-msg.Nacked():
		case <-t.abandon:
			select {
			case <-msg.Acked(): // acked as CloseTimeout passed: not released
				t.settle(d, true)
			default:
			}
			return
		}
		t.mu.Lock()
		lost := d.lost
		t.mu.Unlock()
		if lost {
			// The entry is no longer ours (see renew): never hand it out again.
			t.settle(d, false)
			return
		}
		// Nacked: hand out a fresh copy after a pause, unless the subscription is closing.
		select {
		case <-time.After(t.s.cfg.NackResendSleep):
		case <-t.stopping:
			t.unhand(d)
			return
		}
		ctx := msg.Context()
		msg = msg.Copy()
		msg.SetContext(ctx)
		t.mu.Lock()
		d.msg, d.delivered = msg, false
		t.mu.Unlock()
	}
}

// unhand marks d as not running: it is released at shutdown without waiting for it.
func (t *topic) unhand(d *delivery) {
	t.mu.Lock()
	was := d.delivered
	d.delivered = false
	t.mu.Unlock()
	if was {
		t.signalSettled()
	}
}

func (t *topic) settle(d *delivery, acked bool) {
	t.mu.Lock()
	ok := t.held[d.id] == d // only d itself: never another copy of its entry
	if ok {
		delete(t.held, d.id)
		if acked && !t.s.cfg.DeferAck && !d.lost {
			t.acks = append(t.acks, d.id)
		}
	}
	t.mu.Unlock()
	d.cancel(context.Canceled)
	if ok {
		t.s.release(1)
	}
	t.signalSettled()
}

func (t *topic) signalSettled() {
	select {
	case t.settled <- struct{}{}:
	default:
	}
}

func (t *topic) ackLoop(done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(t.s.cfg.AckInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.stopping:
			return
		case <-tick.C:
			t.flushAcks(context.Background())
		}
	}
}

func (t *topic) flushAcks(ctx context.Context) {
	t.mu.Lock()
	ids := t.acks
	t.acks = nil
	t.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if err := t.s.rdb.XAck(ctx, t.name, t.s.cfg.Group, ids...).Err(); err != nil {
		// The entries stay pending; whoever recovers this group's idle entries redelivers them.
		t.logger.Error("ack entries", err, watermill.LogFields{"count": len(ids)})
	}
}

//go:embed renew.lua
var renewSrc string
var renewScript = redis.NewScript(renewSrc)

// renew re-claims the topic's held entries; see Subscriber.renewLeases.
func (t *topic) renew() {
	t.mu.Lock()
	ids := make([]string, 0, len(t.held))
	for id, d := range t.held {
		if !d.lost {
			ids = append(ids, id)
		}
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), t.s.cfg.LeaseInterval)
	defer cancel()
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := make([]any, 0, 2+len(chunk))
		args = append(args, t.s.cfg.Group, t.s.cfg.Consumer)
		for _, id := range chunk {
			args = append(args, id)
		}
		kept, err := renewScript.Run(ctx, t.s.rdb, []string{t.name}, args...).StringSlice()
		switch {
		case err == nil:
		case groupGone(err):
			// The group or the stream is gone (FLUSHALL, XGROUP DESTROY, DEL): nothing is
			// pending for this consumer any more, every lease in the chunk is lost.
			kept = nil
		default:
			// A Redis outage (or LOADING, OOM...) is not a lost lease: try again at the next
			// interval.
			t.logger.Error("renew leases", err, watermill.LogFields{"count": len(chunk)})
			return
		}
		ok := make(map[string]struct{}, len(kept))
		for _, id := range kept {
			ok[id] = struct{}{}
		}
		t.mu.Lock()
		for _, id := range chunk {
			if _, still := ok[id]; still {
				continue
			}
			if d, held := t.held[id]; held && !d.lost {
				d.lost = true
				d.cancel(ErrLeaseLost)
				t.logger.Info("lease lost", watermill.LogFields{"entry": id})
			}
		}
		t.mu.Unlock()
	}
}

// groupGone reports whether err says that a stream or its consumer group does not exist. Redis
// 7 keeps the NOGROUP prefix of an error raised in a script; older servers and miniredis wrap it
// in a longer message.
func groupGone(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false // a network error, a timeout...
	}
	msg := rerr.Error()
	return strings.Contains(msg, "NOGROUP") || strings.Contains(strings.ToLower(msg), "no such key")
}

// EntryTime returns the time encoded in a stream entry id ("<ms>-<seq>"), or the zero time.
func EntryTime(id string) time.Time {
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			ms, err := strconv.ParseInt(id[:i], 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.UnixMilli(ms)
		}
	}
	return time.Time{}
}
