package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Defaults of Config.
const (
	// defaultConcurrency is unexported because pipeline.Worker sets Concurrency itself, with a
	// default of its own (10, pipeline.WorkerConfig.Concurrency's). Two exported defaults for
	// one setting would disagree.
	defaultConcurrency     = 100
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
	// pending for this consumer. It was recovered or deleted elsewhere, or its group or stream
	// is gone.
	ErrLeaseLost = errors.New("stream: lease lost")
)

// Every field has one meaning per value. Zero means the documented default. A negative or
// otherwise unusable value makes NewSubscriber return an error; so does a BlockTime under a
// millisecond, which Redis would read as "block forever". A feature is turned off by a boolean
// field of its own (DisableLeaseRenewal), never by a special value of another field.
type Config struct {
	// Client is the Redis client (standalone, cluster or failover). Required. Close does not
	// close it.
	Client redis.UniversalClient
	// Group is the consumer group; it is created (MKSTREAM, from the first entry) on Subscribe.
	// Required.
	Group string
	// Consumer names this subscriber in the group. Defaults to hostname-pid-random. Two live
	// subscribers must not share a name. Each would take the other's entries for orphans of its
	// own lost reads (see the package doc).
	Consumer string
	// Unmarshaller turns entries into messages. Defaults to DefaultUnmarshaller.
	Unmarshaller Unmarshaller
	// Concurrency bounds the entries read and not yet settled, across all topics: the number of
	// handlers a router runs at once. Settled means acked, or with ManualSettle passed to
	// Settle. It is a hard bound. A reader reserves its slots before each XREADGROUP, whose
	// COUNT is what it reserved, and gives back what the read did not use. A topic whose last
	// read found nothing reserves one slot while its read blocks. Readers waiting for slots are
	// served in turn, so no topic starves another. Defaults to 100.
	Concurrency int
	// Priority, when set, orders the hand-out of free slots among the waiting readers by class,
	// instead of first come, first served. Nil: first come, first served. It gives each topic (a
	// stream key) a class and the class's weight, at least 1. Topics of one class share its
	// weight and rank, as the partitions of one queue do. The first topic subscribed in a class
	// sets its weight.
	//
	// Without StrictPriority the weights are shares (stride scheduling). Each class has a pass,
	// advanced by slots taken / weight at every hand-out. The waiting reader of the class with
	// the smallest pass is served. So classes that all have entries take slots in proportion to
	// their weights. A class whose streams are empty leaves its share to the others. The weights
	// divide the slots only when readers wait for them, with handlers holding every slot. While
	// slots are free and nobody waits, every reader takes them at once.
	//
	// A class keeps its pass while its readers are away reading: they took slots and have not
	// asked again. Slots freed meanwhile may be held for such a class, if its pass is smaller
	// than the waiting readers' and its reader's last read was full. The hold lasts until that
	// reader asks again, its read comes back short, or 10ms pass since it took its slots
	// (BlockTime if shorter). So a class that has run out of work holds no slot for long.
	// Without the hold, slots freed one at a time (as handlers finish) would go to every waiting
	// class in turn, whatever its weight.
	//
	// A class whose streams were empty comes back with a credit of at most one batch (BatchSize
	// / weight of pass). So an idle class does not store up a burst. Reads stay batched: the
	// reader served takes every slot free then, held ones included, up to BatchSize.
	Priority func(topic string) (class string, weight int)
	// StrictPriority, with Priority, makes the weights ranks. A reader is served only when no
	// reader of a higher-ranked class may read (not paused) and wants slots. A reader wants
	// slots when it waits for them, had a full last read (its stream likely has more), or has
	// not read yet. Among equals, first come, first served.
	//
	// So while a higher class has work, no lower class reads. Once its last read came back short
	// (its streams are empty), the lower classes read. They stop when the higher class waits for
	// slots again, which puts it first in line. A lower reader's read under way when the higher
	// class's work arrives may finish.
	StrictPriority bool
	// Levels, when set, makes topics of one family strict levels within their class. A family is
	// a stream split into levels, such as a queue's priority levels. Levels gives each topic a
	// family (empty: none) and its level in it, the lowest first. Nil: no families.
	//
	// A reader may take slots only while no lower level of its family that may read (not paused)
	// is hungry. A level is hungry when its last read was full, it has not read yet, or its
	// topic was paused since. It is also hungry when a higher level found entries in its stream.
	// A higher level's read checks, in the same script call (levelread.lua), that no lower
	// level's stream has undelivered entries. If one has, it reads nothing, and that level
	// becomes hungry.
	//
	// So whenever entries of two levels wait, the lower level's are read first, also right after
	// a pause. A higher level's blocking read under way when a lower level's entries arrive may
	// finish. An idle lower level does not hold up a higher one. However few the slots, an entry
	// of any level of an idle family is read within about a BlockTime (see
	// Subscriber.checkLocked). On a cluster a family's streams must share a hash slot. The class
	// hand-out (Priority, StrictPriority) is unchanged: the family's topics share their class.
	Levels func(topic string) (family string, level int)
	// BatchSize bounds the COUNT of one XREADGROUP. Defaults to DefaultBatchSize.
	BatchSize int
	// BlockTime is how long one XREADGROUP waits for new entries, at least a millisecond. It
	// bounds how long a closing subscription waits for its last read. Defaults to
	// DefaultBlockTime.
	BlockTime time.Duration
	// LeaseInterval is how often the leases of held entries are renewed. It is also how often
	// each subscription sweeps this consumer's pending entries for orphans (see the package
	// doc). It must be well under the idle time after which the application recovers entries; a
	// third of it is usual. Defaults to DefaultLeaseInterval.
	LeaseInterval time.Duration
	// DisableLeaseRenewal turns lease renewal off: held entries go idle, and a recoverer may
	// take them from a live handler. The orphan sweep still runs every LeaseInterval.
	DisableLeaseRenewal bool
	// DeferAck leaves acknowledgement to the application: a message's Ack then only frees its
	// slot, and the entry stays pending until the application XACKs it.
	DeferAck bool
	// ManualSettle (which implies DeferAck) replaces watching each message's Ack and Nack with
	// an explicit call. The application calls Settle once it is done with a message. That frees
	// its slot and ends its lease renewal. Ack and Nack do nothing, and nothing is handed out
	// again. It spares a goroutine per message in flight, and a hand-off per message.
	ManualSettle bool
	// Run, with ManualSettle, runs each message handed out instead of sending it on the channel
	// Subscribe returns. That channel then carries nothing and closes when the subscription
	// ends, so a router still manages the subscriptions. Each message runs on a goroutine kept
	// for the next one, at most Concurrency of them. That spares, per message, the goroutine a
	// router starts, its stack's growth and two hand-offs. Run should return soon after it
	// settles the message: a new message may wait for a runner. A panic in Run is logged and
	// recovered, as a router does. Close waits for Run calls to return, at most a second past
	// CloseTimeout.
	//
	// The message's context answers message.HandlerNameFromCtx (RouterHandler's name for the
	// topic), PublisherNameFromCtx, SubscriberNameFromCtx and SubscribeTopicFromCtx as a
	// router's consumer handler would (AddConsumerHandler with this Subscriber).
	Run func(msg *message.Message)
	// RouterHandler names the router handler of a topic, for Run's messages' contexts.
	RouterHandler func(topic string) string
	// AckInterval is how long acks are collected before one XACK sends them. Defaults to
	// DefaultAckInterval.
	AckInterval time.Duration
	// NackResendSleep is how long a nacked message waits before it is handed out again.
	// Defaults to DefaultNackResendSleep.
	NackResendSleep time.Duration
	// CloseTimeout is how long a closing subscription waits for handed-out messages to be
	// acked before it cancels their contexts. Defaults to DefaultCloseTimeout.
	CloseTimeout time.Duration
	// OnRelease, when set, receives the entries a closing subscription still holds, for example
	// to put them back at once. Those are entries read but never acked: not yet handed out, or
	// still running after CloseTimeout. Without it they stay pending for the application's
	// recovery.
	OnRelease func(ctx context.Context, stream string, ids []string)
	// Prepare, when set, sees each batch of messages a subscription read or adopted, before any
	// is handed out. It runs in the subscription's reader. It is where an application makes one
	// call for a batch instead of one per message, such as holding the batch to a shared limit.
	// It may give a message a context derived from the message's own.
	//
	// Prepare may keep messages back. A true in skip, at a message's index, means the
	// application is done with that message; nil keeps none back. A message kept back is settled
	// as Settle would: its slot freed, its lease no longer renewed. It is never handed out or
	// acknowledged; its entry is the application's to deal with.
	//
	// ctx ends when the subscription starts closing. The shutdown waits for Prepare to return.
	// While Prepare runs, the topic reads nothing more.
	Prepare func(ctx context.Context, topic string, msgs []*message.Message) (skip []bool)
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
	c.Concurrency = cmp.Or(c.Concurrency, defaultConcurrency)
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
		bad("Config.Concurrency is %d; it must be positive (zero means %d)", c.Concurrency, defaultConcurrency)
	}
	if c.Run != nil && !c.ManualSettle {
		bad("Config.Run needs Config.ManualSettle")
	}
	if c.StrictPriority && c.Priority == nil {
		bad("Config.StrictPriority needs Config.Priority")
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

	mu      sync.Mutex
	closed  bool
	topics  []*topic                // live and closing subscriptions
	streams map[string]*streamState // by stream name, while it has subscriptions
	// Slots (see reserve). taken is how many are reserved for reads or held by unsettled
	// entries, across topics. It never exceeds Config.Concurrency.
	taken  int
	queue  []*waiter // readers waiting for slots, first come first served
	turn   *waiter   // the reader woken to take slots next; nobody else takes any meanwhile
	paused bool      // no slot is given for a read (see Pause)
	reads  int       // reads under way: slots reserved, reply not yet back (see Reads)
	// topicReads counts the reads under way by stream (see TopicReads).
	topicReads map[string]int
	// readsDone are the callers of WaitTopicReads, woken by endRead.
	readsDone []*readsWaiter
	// pausedTopics are the streams whose readers get no slot (see PauseTopic); a waiter of
	// one stays in line without holding up the others.
	pausedTopics map[string]bool
	// With Config.Priority: the classes by name, the pass of the last hand-out (vtime), and
	// under StrictPriority the readers whose last read was full (hungry).
	classes map[string]*class
	vtime   float64
	hungry  map[*waiter]bool
	// With Config.Levels: the readers of each family. Its readers' hunger is in hungry too.
	families map[string][]*waiter
	// With Config.Priority and not StrictPriority: every reader (see holdLocked), and the
	// timer that ends a hold (holdAt: when it fires; zero when it is not set).
	readers   []*waiter
	holdTimer *time.Timer
	holdAt    time.Time

	runners *runners // with Config.Run

	closing      chan struct{}
	renewNow     chan struct{}  // RenewNow's request to maintain
	wg           sync.WaitGroup // topic goroutines and maintain
	maintainOnce sync.Once
}

// NewSubscriber returns a Subscriber; it reads nothing until Subscribe.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Subscriber{
		cfg:          cfg,
		rdb:          cfg.Client,
		logger:       cfg.Logger.With(watermill.LogFields{"consumer": cfg.Consumer}),
		streams:      map[string]*streamState{},
		pausedTopics: map[string]bool{},
		topicReads:   map[string]int{},
		classes:      map[string]*class{},
		hungry:       map[*waiter]bool{},
		families:     map[string][]*waiter{},
		closing:      make(chan struct{}),
		renewNow:     make(chan struct{}, 1),
	}
	if cfg.Run != nil {
		s.runners = newRunners(cfg.Run, cfg.Concurrency, s.logger)
	}
	return s, nil
}

// Consumer is the subscriber's consumer name in the group.
func (s *Subscriber) Consumer() string { return s.cfg.Consumer }

// Running counts the messages handed out and not yet settled, across every subscription: the
// handlers running now. Settled means acked, nacked for good or, with ManualSettle, passed to
// Settle. Read entries not yet handed out are not counted. A closing subscription's messages
// count until they settle or CloseTimeout passes.
func (s *Subscriber) Running() int {
	s.mu.Lock()
	topics := append([]*topic(nil), s.topics...)
	s.mu.Unlock()
	n := 0
	for _, t := range topics {
		n += t.running()
	}
	return n
}

// ensureGroup makes the subscriber's group on topicName unless it exists.
//
// Redis refuses XGROUP CREATE when it is out of memory, before it looks for the group. So a
// refusal is checked against the groups the stream has, with a read, which Redis still allows. A
// worker started while Redis refuses writes joins the group the others made rather than failing.
// When the group does not exist yet, it waits for Redis to take writes again. It backs off from
// 100 ms to 2 s, as a worker waits for a Redis it cannot reach, until ctx ends or Close.
func (s *Subscriber) ensureGroup(ctx context.Context, topicName string) error {
	wait := 100 * time.Millisecond
	for warned := false; ; warned = true {
		err := s.rdb.XGroupCreateMkStream(ctx, topicName, s.cfg.Group, "0").Err()
		if err == nil || rediserr.IsGroupExists(err) {
			return nil
		}
		if groups, ierr := s.rdb.XInfoGroups(ctx, topicName).Result(); ierr == nil &&
			slices.ContainsFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == s.cfg.Group }) {
			return nil
		}
		err = fmt.Errorf("create group %s on %s: %w", s.cfg.Group, topicName, err)
		if !rediserr.IsOOM(err) {
			return err
		}
		if !warned {
			s.logger.Error("Redis refuses writes (out of memory); waiting to create the group", err,
				watermill.LogFields{"topic": topicName})
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (then: %w)", ctx.Err(), err)
		case <-s.closing:
			return ErrClosed
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// Subscribe starts reading topic (a stream key) and returns its messages. The channel closes
// after ctx ends or Close is called, once the subscription has shut down (see the package doc).
func (s *Subscriber) Subscribe(ctx context.Context, topicName string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.mu.Unlock()

	if err := s.ensureGroup(ctx, topicName); err != nil {
		return nil, err
	}

	t := &topic{
		s:         s,
		name:      topicName,
		out:       make(chan *message.Message),
		held:      make(map[string]*delivery),
		sweep:     make(chan struct{}, 1),
		sweepFrom: "-",
		stopping:  make(chan struct{}),
		abandon:   make(chan struct{}),
		readDone:  make(chan struct{}),
		settled:   make(chan struct{}, 1),
		logger:    s.logger.With(watermill.LogFields{"topic": topicName}),
		outage:    outage.Spell{Min: minReadBackoff, Max: maxReadBackoff},
		ackOutage: outage.Spell{Min: minReadBackoff, Max: maxReadBackoff},
	}
	if s.runners != nil {
		handler := ""
		if s.cfg.RouterHandler != nil {
			handler = s.cfg.RouterHandler(topicName)
		}
		t.router = newRouterValues(s, handler, topicName)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	// A stream's state lives while it has subscriptions. One that subscribes while another is
	// still closing shares it, with its notion of when the stream was first subscribed here.
	t.st = s.streams[topicName]
	if t.st == nil {
		t.st = newStreamState()
		s.streams[topicName] = t.st
	}
	t.st.mu.Lock()
	t.st.topics = append(t.st.topics, t)
	t.st.mu.Unlock()
	s.topics = append(s.topics, t)
	s.wg.Add(1)
	s.mu.Unlock()

	s.maintainOnce.Do(func() {
		s.wg.Add(1)
		go s.maintain()
	})
	go t.run(ctx)
	return t.out, nil
}

// Close stops every subscription (see the package doc) and waits for them, and for the Run
// calls (Config.Run). It does not close the Redis client. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
		if s.holdTimer != nil {
			s.holdTimer.Stop()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	if s.runners != nil {
		s.runners.end() // no subscription is left to submit
	}
	return nil
}

// Pause stops reading: no XREADGROUP is issued on any topic until Resume, and no orphan is
// adopted. A read already under way may finish, and its messages are handed out as usual.
// Everything else goes on. Held messages keep their leases renewed, settle and free their slots.
// Close or the end of a subscription's context shut down as promptly as ever. Pause and Resume
// may be called any number of times, from any goroutine; the last call wins.
func (s *Subscriber) Pause() {
	s.mu.Lock()
	s.paused = true
	s.pausedHungryLocked("")
	s.mu.Unlock()
}

// Reads counts the reads under way on every topic: XREADGROUPs and orphan adoptions whose
// slots are reserved and whose replies are not back yet. After Pause, once Reads is 0, no
// entry is read until Resume: Pause has taken its full effect.
func (s *Subscriber) Reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// TopicReads counts the reads of topic under way, as Reads does for every topic. After
// PauseTopic, once TopicReads is 0, no entry of topic is read until ResumeTopic: the pause has
// taken its full effect on that topic.
func (s *Subscriber) TopicReads(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topicReads[topic]
}

// WaitTopicReads waits until no read of any of topics is under way (TopicReads is 0 for each),
// and returns nil. If ctx ends first it returns ctx's error. After PauseTopic of each, nil means
// the pauses have taken their full effect. The end of the last read wakes it, with no polling.
// So a pause's confirmation follows that end at once.
func (s *Subscriber) WaitTopicReads(ctx context.Context, topics ...string) error {
	s.mu.Lock()
	if s.topicsIdleLocked(topics) {
		s.mu.Unlock()
		return nil
	}
	rw := &readsWaiter{topics: topics, done: make(chan struct{})}
	s.readsDone = append(s.readsDone, rw)
	s.mu.Unlock()
	select {
	case <-rw.done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		s.readsDone = slices.DeleteFunc(s.readsDone, func(o *readsWaiter) bool { return o == rw })
		s.mu.Unlock()
		select {
		case <-rw.done: // the reads ended meanwhile
			return nil
		default:
			return ctx.Err()
		}
	}
}

// readsWaiter is a caller of WaitTopicReads: done is closed once none of topics has a read
// under way.
type readsWaiter struct {
	topics []string
	done   chan struct{}
}

func (s *Subscriber) topicsIdleLocked(topics []string) bool {
	return !slices.ContainsFunc(topics, func(t string) bool { return s.topicReads[t] > 0 })
}

// Resume undoes Pause.
func (s *Subscriber) Resume() {
	s.mu.Lock()
	s.paused = false
	s.wakeLocked()
	s.mu.Unlock()
}

// PauseTopic stops reading the stream topic, as Pause does for every stream. No XREADGROUP is
// issued on it, and no orphan of it adopted, until ResumeTopic. That holds whether it is
// subscribed now or later. A read under way may finish. A reader of a paused topic holds no slot
// while it waits; the other topics' readers take the slots as if it were not there. Held
// messages of the topic go on as under Pause. Topics are named as in Subscribe. Pausing a paused
// topic, or resuming one that is not paused, does nothing.
func (s *Subscriber) PauseTopic(topic string) {
	s.mu.Lock()
	s.pausedTopics[topic] = true
	s.pausedHungryLocked(topic)
	s.mu.Unlock()
}

// ResumeTopic undoes PauseTopic.
func (s *Subscriber) ResumeTopic(topic string) {
	s.mu.Lock()
	delete(s.pausedTopics, topic)
	s.wakeLocked()
	s.mu.Unlock()
}

// TopicPaused reports whether PauseTopic holds topic (Pause is not counted).
func (s *Subscriber) TopicPaused(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pausedTopics[topic]
}

// waiter is a reader waiting for slots; ready closes when its turn comes.
type waiter struct {
	topic string // the stream it reads
	cls   *class // its class under Config.Priority, else nil
	// idle: the reader's last read found nothing. Set by the reader before reserve; a class
	// coming back from idle keeps a credit of at most one batch (see reserve).
	idle  bool
	ready chan struct{}
	// fam is its family under Config.Levels ("" for none), level its level there.
	fam   string
	level int
	// Under the Subscriber's mu. While reading is set, its slots are taken and its read's reply
	// is not back. Set empty means its last read came back empty; when not reading, it is on its
	// way to ask for a slot again. For a reader of a family, check holds the lower levels'
	// streams its read must check first (levelread.lua), set by reserve. It is nil for a plain
	// read.
	reading bool
	empty   bool
	check   []string
	// Weighted readers (Config.Priority, not StrictPriority), under the Subscriber's mu. Set
	// away means the reader took slots at awayAt and has not asked again. It is reading, or
	// handing out what it read. Set more means its last read filled what it asked for, so its
	// stream likely has more. A one-slot read of an idle reader does not count.
	away   bool
	awayAt time.Time
	more   bool
}

// class is a priority class of topics (Config.Priority).
type class struct {
	weight int
	pass   float64
}

// newWaiter is the waiter of topic's reader, in its class under Config.Priority.
func (s *Subscriber) newWaiter(topic string) *waiter {
	w := &waiter{topic: topic}
	if s.cfg.Levels != nil {
		w.fam, w.level = s.cfg.Levels(topic)
		if w.fam != "" {
			s.mu.Lock()
			s.families[w.fam] = append(s.families[w.fam], w)
			s.hungry[w] = true // until its first read says otherwise
			s.mu.Unlock()
		}
	}
	if s.cfg.Priority == nil {
		return w
	}
	name, weight := s.cfg.Priority(topic)
	if name == "" {
		name = "\x00" + topic // a class of its own
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.classes[name]
	if c == nil {
		c = &class{weight: max(1, weight), pass: s.vtime}
		s.classes[name] = c
	}
	w.cls = c
	if s.cfg.StrictPriority {
		s.hungry[w] = true // until its first read says otherwise, a reader may have work
	} else {
		s.readers = append(s.readers, w)
	}
	return w
}

// weighted reports whether w's reader is served by its class's pass: Config.Priority without
// StrictPriority.
func (s *Subscriber) weighted(w *waiter) bool { return w.cls != nil && !s.cfg.StrictPriority }

// mayReadLocked reports whether w's reader may take slots now that reading is not paused:
// neither everything (Pause) nor its topic (PauseTopic).
func (s *Subscriber) mayReadLocked(w *waiter) bool {
	return !s.paused && !s.pausedTopics[w.topic]
}

// leave drops an ended reader from its family (Config.Levels) and from the weighted readers
// that slots may be held for.
func (s *Subscriber) leave(w *waiter) {
	if w.fam == "" && !s.weighted(w) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.readers, w); i >= 0 {
		s.readers = slices.Delete(s.readers, i, i+1)
	}
	if w.fam == "" {
		s.wakeLocked()
		return
	}
	m := s.families[w.fam]
	if i := slices.Index(m, w); i >= 0 {
		m = slices.Delete(m, i, i+1)
	}
	if len(m) == 0 {
		delete(s.families, w.fam)
	} else {
		s.families[w.fam] = m
	}
	delete(s.hungry, w)
	s.wakeLocked()
}

// lowerLevelWantsLocked reports whether a reader of a lower level of w's family (Config.Levels)
// that may read is hungry. Hungry means its last read was full, it has not read yet, or its
// topic was paused since it last read. It also means a higher level's read found entries in its
// stream.
//
// A lower-level reader that merely waits for slots does not count. Most of the time it is an
// idle one waiting to block on its empty stream. Counting it kept the slots from every higher
// level for good when the slots were fewer than the levels. In issue 30, at concurrency 1,
// levels 1 and 2 took the one slot in turn and level 4 waited minutes. The higher level's read
// finds out instead, in Redis, whether the lower level has entries now. It does so in the same
// call as the read (levelread.lua, see checkLocked).
func (s *Subscriber) lowerLevelWantsLocked(w *waiter) bool {
	for _, h := range s.families[w.fam] {
		if h.level < w.level && s.mayReadLocked(h) && s.hungry[h] {
			return true
		}
	}
	return false
}

// checkLocked returns the streams of the lower levels of w's family (Config.Levels) that w's
// next read must check first (levelread.lua), lowest first. It returns nil for a plain read of
// its stream. Only readers that may read count: a paused level holds up nobody.
//
// The check and the read are one script call. So no lower-level entry can arrive between them,
// and a read costs one round trip whether or not it checks. The levels of a queue need no extra
// call per read.
//
// A script cannot block, though. So a reader whose stream was empty reads plainly, blocking on
// its stream for new entries, when every lower level's reader is busy. Busy means reading
// itself, where its own blocking read sees its stream's new entries, or handing out what it
// read. Then the blocking read here keeps no slot from a lower level.
//
// A lower level's reader may instead wait for a slot, or be on its way to ask for one after an
// empty read. A blocking read here would then keep that slot from it for a whole BlockTime. So
// the reader checks and reads without blocking, and the slot goes back to the line at once. The
// line is first come, first served. The lower reader's turn comes within a round of the line,
// and its own read, having no lower level in line, blocks. So an idle family makes about one
// read per level per BlockTime, however few the slots, and never loops on reads that do not
// block. A new entry of any level is read within about a BlockTime.
func (s *Subscriber) checkLocked(w *waiter) []string {
	if w.fam == "" {
		return nil
	}
	var lower []*waiter
	for _, h := range s.families[w.fam] {
		if h.level < w.level && s.mayReadLocked(h) {
			lower = append(lower, h)
		}
	}
	if len(lower) == 0 {
		return nil
	}
	need := !w.idle // a reader that expects entries checks before every read
	for _, h := range lower {
		if need {
			break
		}
		need = !h.reading && (h.empty || s.turn == h || slices.Contains(s.queue, h))
	}
	if !need {
		return nil
	}
	slices.SortStableFunc(lower, func(a, b *waiter) int { return cmp.Compare(a.level, b.level) })
	check := make([]string, len(lower))
	for k, h := range lower {
		check[k] = h.topic
	}
	return check
}

// lowerHasWork records that w's read found entries in stream, a lower level's of its family, and
// read nothing (levelread.lua). That level's readers become hungry, so w waits for them. The n
// slots w took go back.
func (s *Subscriber) lowerHasWork(w *waiter, stream string, n int) {
	s.mu.Lock()
	for _, h := range s.families[w.fam] {
		if h.topic == stream {
			s.hungry[h] = true
		}
	}
	s.taken -= n
	s.wakeLocked()
	s.mu.Unlock()
}

// pausedHungryLocked marks the readers of a family (Config.Levels) of topic as hungry; an empty
// topic means every topic. Entries may arrive while they read nothing. So when they may read
// again, a lower level reads before a higher one takes slots. Without it, a lower level idle
// before the pause was away on its first read, neither waiting nor hungry, when a higher level
// was resumed. The higher level then read alongside it.
func (s *Subscriber) pausedHungryLocked(topic string) {
	for _, m := range s.families {
		for _, h := range m {
			if topic == "" || h.topic == topic {
				s.hungry[h] = true
			}
		}
	}
}

// mayTakeLocked is mayReadLocked plus two conditions. Under StrictPriority, no reader of a
// higher class that may read is hungry (its last read was full) or waiting. Under Config.Levels,
// no reader of a lower level of its family is either.
func (s *Subscriber) mayTakeLocked(w *waiter) bool {
	if !s.mayReadLocked(w) {
		return false
	}
	if w.fam != "" && s.lowerLevelWantsLocked(w) {
		return false
	}
	if !s.cfg.StrictPriority {
		return true
	}
	for h := range s.hungry {
		if h.cls.weight > w.cls.weight && s.mayReadLocked(h) {
			return false
		}
	}
	for _, h := range s.queue {
		if h.cls.weight > w.cls.weight && s.mayReadLocked(h) {
			return false
		}
	}
	return true
}

// setHungry records whether w's last read was full, under StrictPriority or for a reader of a
// family (Config.Levels). For a weighted reader, it records whether slots may be held for it
// (waiter.more). The reader calls it before it next reserves, so w.idle still says whether that
// read was an idle reader's one-slot read.
func (s *Subscriber) setHungry(w *waiter, full bool) {
	tracked, weighted := s.cfg.StrictPriority || w.fam != "", s.weighted(w)
	if !tracked && !weighted {
		return
	}
	s.mu.Lock()
	wake := false
	if tracked {
		// A read that ends while its topic is paused says nothing of what the pause lets pile
		// up: the reader stays hungry (see pausedHungryLocked).
		if full || !s.mayReadLocked(w) {
			s.hungry[w] = true
		} else if s.hungry[w] {
			delete(s.hungry, w)
			wake = true
		}
	}
	if weighted {
		// One entry read by an idle reader's one-slot read says nothing of a next one. Holding
		// slots for its next read would idle them while that read blocks on an empty stream.
		more := full && !w.idle
		wake = wake || w.more && !more
		w.more = more
	}
	if wake {
		s.wakeLocked()
	}
	s.mu.Unlock()
}

// tookLocked accounts n slots taken by w's reader: its class's pass advances by n / weight.
func (s *Subscriber) tookLocked(w *waiter, n int) {
	if w.cls == nil || s.cfg.StrictPriority {
		return
	}
	s.vtime = max(s.vtime, w.cls.pass)
	w.cls.pass += float64(n) / float64(w.cls.weight)
}

// joinLocked puts w in line.
func (s *Subscriber) joinLocked(w *waiter) { s.queue = append(s.queue, w) }

// reserve takes up to want slots for a read (at least one), waiting while none is free. It
// returns how many it took; the reader gives back what it does not use. It returns 0 when stop
// closes.
//
// Readers that must wait are served in turn, first come, first served. When slots free up, the
// first waiter that may read is woken and takes what is free then, up to its want. Then the next
// is woken if any slot is left. Taking what is free when the reader runs, not when it is woken,
// keeps batches large. A reader not waiting in line never takes slots ahead of those in line
// that may read. While the Subscriber is paused, every reader waits. While its topic is paused,
// a reader waits and is passed over.
func (s *Subscriber) reserve(w *waiter, stop <-chan struct{}, want int) int {
	s.mu.Lock()
	if w.cls != nil && w.idle {
		// Back from empty streams, the class's pass catches up with the hand-outs it did not
		// compete for, less a batch. So it does not take a burst of stored credit. A busy class
		// keeps its pass while its reader is away reading.
		w.cls.pass = max(w.cls.pass, s.vtime-float64(s.cfg.BatchSize)/float64(w.cls.weight))
	}
	weighted := s.weighted(w)
	w.away = false // back: no slot is held for it now, it takes them or waits in line
	for {
		if free := s.cfg.Concurrency - s.taken; free > 0 && s.mayTakeLocked(w) && (s.turn == w || s.turn == nil && s.firstLocked(w)) {
			n := min(free, want)
			s.taken += n
			s.reads++ // with the slots, so that no read is under way uncounted
			s.topicReads[w.topic]++
			w.check = s.checkLocked(w)
			w.reading, w.empty = true, false
			s.tookLocked(w, n)
			if weighted {
				w.away, w.awayAt = true, time.Now()
			}
			if s.turn == w {
				s.turn = nil
				s.wakeLocked()
			}
			s.mu.Unlock()
			return n
		}
		w.ready = make(chan struct{})
		if s.turn == w { // woken, but paused since: first in line again, and the turn passes on
			s.turn = nil
			s.queue = slices.Insert(s.queue, 0, w)
			s.wakeLocked()
		} else {
			s.joinLocked(w)
			if weighted {
				// Slots may be free and held for this reader, which no longer takes them here.
				// They go to the next in line, or to this reader, woken at once.
				s.wakeLocked()
			}
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

// endRead ends w's read counted by reserve: its reply (or error) is back, so it can bring no
// more entries; empty says that it found its stream empty.
func (s *Subscriber) endRead(w *waiter, empty bool) {
	s.mu.Lock()
	s.reads--
	if s.topicReads[w.topic]--; s.topicReads[w.topic] <= 0 {
		delete(s.topicReads, w.topic)
		if len(s.readsDone) > 0 {
			s.readsDone = slices.DeleteFunc(s.readsDone, func(rw *readsWaiter) bool {
				if !s.topicsIdleLocked(rw.topics) {
					return false
				}
				close(rw.done)
				return true
			})
		}
	}
	w.reading, w.empty = false, empty
	s.mu.Unlock()
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

// nextLocked is the index in queue of the waiter to serve next, or -1. That is the first that
// may take slots (mayTakeLocked). Under Config.Priority without StrictPriority, it is the first
// one of the class with the smallest pass. It is -1 when the free slots are held for a reader
// away reading (holdLocked).
func (s *Subscriber) nextLocked() int {
	if s.cfg.Priority == nil || s.cfg.StrictPriority {
		return slices.IndexFunc(s.queue, s.mayTakeLocked)
	}
	best := -1
	for i, w := range s.queue {
		if s.mayTakeLocked(w) && (best < 0 || w.cls.pass < s.queue[best].cls.pass) {
			best = i
		}
	}
	if best >= 0 && s.holdLocked(s.queue[best].cls.pass) {
		return -1
	}
	return best
}

// firstLocked reports whether w's reader, which is not in line, may take free slots ahead of the
// readers in line. First come, first served (and under StrictPriority): when none of them may
// take slots. Weighted: when none of them, nor a reader the slots are held for, has a class of a
// smaller pass.
func (s *Subscriber) firstLocked(w *waiter) bool {
	if !s.weighted(w) {
		return s.nextLocked() < 0
	}
	for _, h := range s.queue {
		if h.cls.pass < w.cls.pass && s.mayTakeLocked(h) {
			return false
		}
	}
	return !s.holdLocked(w.cls.pass)
}

// maxHold bounds how long free slots are held for a reader away reading (holdLocked). So it
// bounds how long they sit idle when the read finds its stream empty after all. A read of a
// stream with entries comes back in well under a millisecond. The bound is for a busy CPU, where
// the reader may wait a while to run again.
const maxHold = 10 * time.Millisecond

// holdLocked reports whether the free slots are held for a weighted reader that is away reading:
// it took slots and has not asked again. The reader's class must have a pass smaller than pass.
// It must be allowed to take slots, and its last read must have been full (waiter.more).
//
// Without the hold, a slot freed while the most-owed classes' readers are away would go to the
// one waiting, whatever its pass. When handlers settle one at a time, every waiting class would
// take one slot in turn, whatever its weight, and read one entry at a time. A hold lasts until
// the reader asks again, its read comes back short, or maxHold passes since it took its slots
// (BlockTime if shorter). So a class that truly has no work does not keep slots idle. The timer
// that ends a hold is set here.
func (s *Subscriber) holdLocked(pass float64) bool {
	var now time.Time
	for _, r := range s.readers {
		if !r.away || !r.more || r.cls.pass >= pass || !s.mayTakeLocked(r) {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		until := r.awayAt.Add(min(maxHold, s.cfg.BlockTime))
		if !now.Before(until) {
			continue
		}
		s.endHoldAtLocked(until)
		return true
	}
	return false
}

// endHoldAtLocked makes sure the hand-out is looked at again by at (wakeLocked), when a hold
// ends at the latest.
func (s *Subscriber) endHoldAtLocked(at time.Time) {
	if !s.holdAt.IsZero() && !s.holdAt.After(at) {
		return // set for then or earlier; that wake sets the next one if need be
	}
	s.holdAt = at
	if s.holdTimer == nil {
		s.holdTimer = time.AfterFunc(time.Until(at), func() {
			s.mu.Lock()
			s.holdAt = time.Time{}
			s.wakeLocked()
			s.mu.Unlock()
		})
		return
	}
	s.holdTimer.Reset(time.Until(at))
}

// wakeLocked wakes the next waiting reader (nextLocked) when a slot is free and no other
// reader's turn is pending.
func (s *Subscriber) wakeLocked() {
	if s.turn != nil || len(s.queue) == 0 || s.taken >= s.cfg.Concurrency || s.paused {
		return
	}
	i := s.nextLocked()
	if i < 0 {
		return
	}
	s.turn = s.queue[i]
	s.queue = slices.Delete(s.queue, i, i+1)
	close(s.turn.ready)
}

// forget drops an ended subscription, so that maintain and memory do not keep it. When it was
// the stream's last, the stream's state goes with it. The next subscription of the stream then
// counts from its own start, after every touch of this one's entries (see topic.run). So its
// orphan sweep leaves them alone.
func (s *Subscriber) forget(t *topic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.topics, t); i >= 0 {
		s.topics = slices.Delete(s.topics, i, i+1)
	}
	t.st.mu.Lock()
	if i := slices.Index(t.st.topics, t); i >= 0 {
		t.st.topics = slices.Delete(t.st.topics, i, i+1)
	}
	if len(t.st.topics) == 0 && s.streams[t.name] == t.st {
		delete(s.streams, t.name)
	}
	t.st.mu.Unlock()
}

// maintain runs every LeaseInterval. Unless DisableLeaseRenewal is set, it renews the lease of
// every held entry. The renewal is renew.lua: XCLAIM with min-idle 0 and JUSTID of the entries
// still pending for this consumer, which resets the idle time and keeps the delivery count.
//
// An entry missing from the reply is no longer pending here. None is when the group or the
// stream is gone (NOGROUP). Such a message's context is cancelled with ErrLeaseLost. Any other
// error leaves the leases to the next interval. Then maintain asks each subscription's reader
// for an orphan sweep (see Orphans in lease.go).
func (s *Subscriber) maintain() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.LeaseInterval)
	defer tick.Stop()
	for {
		sweep := true
		select {
		case <-s.closing:
			return
		case <-tick.C:
		case <-s.renewNow:
			sweep = false
		}
		s.mu.Lock()
		topics := append([]*topic(nil), s.topics...)
		s.mu.Unlock()
		for _, t := range topics {
			if !s.cfg.DisableLeaseRenewal {
				t.renew()
			}
			if !sweep {
				continue
			}
			select {
			case t.sweep <- struct{}{}:
			default:
			}
		}
	}
}

// RenewNow asks for a lease renewal now, ahead of the next LeaseInterval, without an orphan
// sweep. It is for an application that may have missed word that some of its entries were
// deleted, say while a notification channel was down. Their messages' contexts are then
// cancelled with ErrLeaseLost soon, not at the next interval. Requests made while one waits are
// one request. It does nothing with DisableLeaseRenewal, or before the first Subscribe.
func (s *Subscriber) RenewNow() {
	select {
	case s.renewNow <- struct{}{}:
	default:
	}
}

// Revoke gives up the lease of entry id of topic (a stream key) held by this subscriber. It acts
// as a renewal that found the entry gone would. The message's context is cancelled with cause,
// or ErrLeaseLost when cause is nil. The entry is no longer renewed, released at shutdown, or
// handed out again after a nack. The message still holds its slot until it settles. Revoke
// reports whether the entry was held.
//
// It is for an application that learned that the entry was deleted or taken, say because its job
// was canceled. Its handler then stops now, not at the next renewal.
func (s *Subscriber) Revoke(topic, id string, cause error) bool {
	if cause == nil {
		cause = ErrLeaseLost
	}
	s.mu.Lock()
	st := s.streams[topic]
	s.mu.Unlock()
	if st == nil {
		return false
	}
	st.mu.Lock()
	d := st.heldLocked(id)
	if d == nil || d.lost {
		st.mu.Unlock()
		return false
	}
	d.lost = true
	st.mu.Unlock()
	d.cancel(cause)
	return true
}

// Settle tells a ManualSettle subscriber that the application is done with msg. Its slot is
// freed and its lease is no longer renewed. The entry stays pending until the application
// acknowledges it. Only msg itself is settled, never another message made from the same entry.
// Settling a message twice does nothing. So does settling one that shutdown already released, or
// one that is not the subscriber's copy.
func (s *Subscriber) Settle(msg *message.Message) {
	// The message's context (or one derived from it) knows its delivery.
	if d, ok := msg.Context().Value(deliveryKey{}).(*delivery); ok && d.t.s == s {
		d.t.settle(d, false, msg)
		return
	}
	// The context was replaced: look the entry up. The same stream may have two subscriptions
	// for a while, one closing and its successor running. Settle in the one that holds it.
	s.mu.Lock()
	st := s.streams[msg.Metadata[StreamKey]]
	s.mu.Unlock()
	if st == nil {
		return
	}
	st.mu.Lock()
	d := st.heldLocked(msg.Metadata[EntryIDKey])
	st.mu.Unlock()
	if d != nil {
		d.t.settle(d, false, msg)
	}
}
