package stream

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// topic is one subscription.
type topic struct {
	s      *Subscriber
	st     *streamState // shared with the other subscriptions of the stream; st.mu guards held and acks
	name   string
	out    chan *message.Message
	router *routerValues // with Config.Run: the router's context values for its messages
	logger watermill.LoggerAdapter

	held map[string]*delivery // read and not settled
	acks []string             // acked, waiting for the next XACK

	sweep     chan struct{} // asks the reader for an orphan sweep (see topic.adoptOrphans)
	sweepFrom string        // where the next sweep's listing starts; the reader's own
	renewing  sync.Mutex    // held by renew, so that shutdown can wait for one under way

	stopping chan struct{} // closed when the subscription starts shutting down
	// stopCtx ends when stopping closes: Config.Prepare's context.
	stopCtx  context.Context
	abandon  chan struct{} // closed when CloseTimeout passed: stop waiting for acks
	readDone chan struct{}
	settled  chan struct{} // signalled when a handed-out message settles
	inflight sync.WaitGroup

	// outage paces the reader's retries and the subscription's error lines while Redis fails
	// its reads: one line per backoff step, and one when a read goes through again.
	outage outage.Spell
	// ackOutage paces the lines of failing XACKs, which are not retried (see flushAcks).
	ackOutage outage.Spell
}

// Bounds of a reader's backoff while its reads fail.
const (
	minReadBackoff = 100 * time.Millisecond
	maxReadBackoff = 5 * time.Second
)

// logRedisError logs a failed call of the subscription, other than a read, which steps the
// outage itself. It logs it as an error, unless the reader already reports an outage that this
// failure is part of.
func (t *topic) logRedisError(msg string, err error, fields watermill.LogFields) {
	if t.outage.Failing() {
		t.logger.Debug(msg, fields.Add(watermill.LogFields{"error": err.Error()}))
		return
	}
	t.logger.Error(msg, err, fields)
}

type delivery struct {
	t         *topic
	id        string
	msg       *message.Message
	values    map[string]any // the entry's fields as read (EntryValues)
	ctx       entryContext   // the message's context
	cancel    context.CancelCauseFunc
	delivered bool // handed to the output channel at least once
	lost      bool // lease lost: no longer ours to release
}

func (t *topic) run(ctx context.Context) {
	defer t.s.wg.Done()
	// Messages outlive the subscription's context (a closing subscription lets them finish), and
	// each has its own cancel. Their parent must not be cancelable. Every child of a cancelable
	// context is registered in a mutex-guarded map of its parent, and removed on cancel. That is
	// a cost on every message (docs/BENCHMARKS.md, "What each change bought").
	var stop context.CancelFunc
	t.stopCtx, stop = context.WithCancel(context.WithoutCancel(ctx))
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
	stop()
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

	// Taking renewing waits for a renewal under way; once held is empty none touches the
	// released entries again, which a successor's orphan sweep relies on (see forget).
	t.renewing.Lock()
	t.st.mu.Lock()
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
	t.st.mu.Unlock()
	t.renewing.Unlock()
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
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
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
	w := t.s.newWaiter(t.name)
	defer t.s.leave(w)
	defer t.s.setHungry(w, false)
	// A topic whose last read found nothing waits for entries with one slot reserved, so that
	// a blocked read does not keep slots from busy topics. A new subscription starts so.
	idle := true
	sweep := false
	for {
		select {
		case <-t.sweep:
			sweep = true
		default:
		}
		if sweep {
			sweep = false
			if !t.adoptOrphans(ctx, w) {
				return
			}
		}
		want := cfg.BatchSize
		if idle {
			want = 1
		}
		w.idle = idle
		// No sweep of the stream runs from before the read is sent until its entries are
		// held (see streamState.gate). Taken before the slots: a sweep holds the gate while
		// it waits for slots, and must not wait for ours.
		t.st.gate.RLock()
		n := t.s.reserve(w, t.stopping, want)
		if n == 0 {
			t.st.gate.RUnlock()
			return
		}
		var res []redis.XStream
		var err error
		lower := ""
		if w.check != nil {
			res, lower, err = t.readAbove(ctx, n, w.check)
		} else {
			res, err = t.s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group:    cfg.Group,
				Consumer: cfg.Consumer,
				Streams:  []string{t.name, ">"},
				Count:    int64(n),
				Block:    cfg.BlockTime,
			}).Result()
		}
		t.s.endRead(w, lower == "" && (err == nil || errors.Is(err, redis.Nil)) && (len(res) == 0 || len(res[0].Messages) == 0))
		if lower != "" {
			t.st.gate.RUnlock()
			t.s.lowerHasWork(w, lower, n)
			continue
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			t.st.gate.RUnlock()
			t.s.setHungry(w, false)
			t.s.release(n)
			if rediserr.IsNoStream(err) {
				// The stream or group was deleted under us (`conveyor queues delete` while
				// this worker runs): make them again and go on. Redis never went away, so
				// this is no outage and no reconnect.
				err = t.s.rdb.XGroupCreateMkStream(ctx, t.name, cfg.Group, "0").Err()
				if err == nil || rediserr.IsGroupExists(err) {
					t.logger.Info("the stream or its consumer group was deleted while this worker read it; made them again, empty",
						watermill.LogFields{"stream": t.name})
					continue
				}
			}
			// The server may have run the read and the reply been lost on the way: the
			// entries it delivered are pending for this consumer, and nobody else knows.
			sweep = true
			step := t.outage.Failed(time.Now())
			if step.Log {
				t.logger.Error("read stream", err, watermill.LogFields{"retry_in": step.Wait.Round(time.Millisecond),
					"tries": step.Tries, "failing_for": step.FailingFor.Round(time.Millisecond)})
			}
			select {
			case <-t.stopping:
				return
			case <-time.After(step.Wait):
			}
			continue
		}
		if lasted, ended := t.outage.OK(time.Now()); ended {
			lasted = lasted.Round(time.Millisecond)
			t.logger.Info("reconnected to Redis after "+lasted.String(), watermill.LogFields{"after": lasted})
		}
		idle = len(res) == 0 || len(res[0].Messages) == 0
		t.s.setHungry(w, !idle && len(res[0].Messages) >= n)
		if idle {
			t.st.gate.RUnlock()
			t.s.release(n)
			select {
			case <-t.stopping:
				return
			default:
				continue
			}
		}
		held, fresh := t.take(ctx, res[0].Messages, false)
		t.st.gate.RUnlock()
		t.s.release(n - held) // what the read did not use, or found held already
		if !t.dispatch(fresh) {
			return
		}
	}
}

// take makes messages of entries read or adopted, and holds them. It skips any that a
// subscription of the stream holds already. It notes the entries' ids as handed to this consumer
// (see Orphans in lease.go). It returns how many it holds now and, unless the subscription is
// stopping, the deliveries to hand out. Checking and holding are one step under the stream's
// mutex.
func (t *topic) take(ctx context.Context, entries []redis.XMessage, adopted bool) (held int, fresh []*delivery) {
	cfg := t.s.cfg
	stopping := false
	select {
	case <-t.stopping:
		stopping = true
	default:
		fresh = make([]*delivery, 0, len(entries))
	}
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if !adopted {
		st.noteLocked(entries[0].ID, entries[len(entries)-1].ID, t)
	}
	for i := range entries {
		x := &entries[i]
		if st.heldLocked(x.ID) != nil {
			// Read again while held: the group's read position moved back (XGROUP SETID, a
			// group made again from "0", a restore or failover to older data). The held
			// copy goes on, lease and all; this one is not handed out.
			continue
		}
		if adopted {
			st.noteLocked(x.ID, x.ID, t)
		}
		msg := cfg.Unmarshaller.Unmarshal(t.name, x.ID, x.Values)
		mctx, cancel := context.WithCancelCause(ctx)
		d := &delivery{t: t, id: x.ID, msg: msg, values: x.Values, cancel: cancel}
		d.ctx = entryContext{mctx, d}
		msg.SetContext(&d.ctx)
		t.held[x.ID] = d
		held++
		if !stopping {
			if !cfg.ManualSettle {
				t.inflight.Add(1)
			}
			fresh = append(fresh, d)
		}
	}
	return held, fresh
}

// dispatch hands fresh deliveries out and reports false when the subscription is stopping.
func (t *topic) dispatch(fresh []*delivery) bool {
	fresh = t.prepare(fresh)
	if t.s.cfg.ManualSettle {
		// No goroutine waits on the message: hand it to the router here, or to a runner
		// (Config.Run). Either takes each message at once.
		for _, d := range fresh {
			if !t.handOut(d) {
				return false // the rest stay held and are released at shutdown
			}
		}
		return true
	}
	// One goroutine per message waits for its ack or nack; the router runs each message on a
	// goroutine of its own as well. One that finds the subscription stopping hands nothing out,
	// and its entry is released at shutdown.
	for _, d := range fresh {
		go t.deliver(d)
	}
	select {
	case <-t.stopping:
		return false
	default:
		return true
	}
}

// prepare passes fresh to Config.Prepare, settles the deliveries it keeps back and returns the
// others.
func (t *topic) prepare(fresh []*delivery) []*delivery {
	if t.s.cfg.Prepare == nil || len(fresh) == 0 {
		return fresh
	}
	msgs := make([]*message.Message, len(fresh))
	for i, d := range fresh {
		msgs[i] = d.msg
	}
	skip := t.s.cfg.Prepare(t.stopCtx, t.name, msgs)
	if skip == nil {
		return fresh
	}
	kept := fresh[:0]
	for i, d := range fresh {
		if i >= len(skip) || !skip[i] {
			kept = append(kept, d)
			continue
		}
		t.settle(d, false, nil)
		if !t.s.cfg.ManualSettle {
			t.inflight.Done() // take counted it for a deliver goroutine that will not run
		}
	}
	return kept
}

// handOut sends d's message to the router unless the subscription is stopping, and reports
// whether it did.
func (t *topic) handOut(d *delivery) bool {
	// Marked before the send: the handler may settle it before the send returns here.
	t.st.mu.Lock()
	d.delivered = true
	t.st.mu.Unlock()
	// A select between a ready reader and a closed stopping picks at random: check first, so
	// a hand-out that starts after shutdown began sends nothing. One already waiting in the
	// select below when it begins may still go out. It is then one more message the shutdown
	// waits for (CloseTimeout) and releases if it is not acked. Nothing but this check comes
	// between the mark and the select: a goroutine parked on the mutex above must not be
	// caught halfway when shutdown begins.
	select {
	case <-t.stopping:
		t.unhand(d)
		return false
	default:
	}
	if r := t.s.runners; r != nil {
		r.submit(d.msg)
		return true
	}
	select {
	case t.out <- d.msg:
		return true
	case <-t.stopping:
		t.unhand(d)
		return false
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
			t.settle(d, true, nil)
			return
		case <-msg.Nacked():
		case <-t.abandon:
			select {
			case <-msg.Acked(): // acked as CloseTimeout passed: not released
				t.settle(d, true, nil)
			default:
			}
			return
		}
		t.st.mu.Lock()
		lost := d.lost
		t.st.mu.Unlock()
		if lost {
			// The entry is no longer ours (see renew): never hand it out again.
			t.settle(d, false, nil)
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
		t.st.mu.Lock()
		d.msg, d.delivered = msg, false
		t.st.mu.Unlock()
	}
}

// unhand marks d as not running: it is released at shutdown without waiting for it.
func (t *topic) unhand(d *delivery) {
	t.st.mu.Lock()
	was := d.delivered
	d.delivered = false
	t.st.mu.Unlock()
	if was {
		t.signalSettled()
	}
}

// settle ends d: its slot is freed and its context cancelled. With msg set, only if d's
// message is msg. It does nothing when d is no longer held (settled already, or released).
func (t *topic) settle(d *delivery, acked bool, msg *message.Message) {
	t.st.mu.Lock()
	ok := t.held[d.id] == d && (msg == nil || d.msg == msg)
	if ok {
		delete(t.held, d.id)
		if acked && !t.s.cfg.DeferAck && !d.lost {
			t.acks = append(t.acks, d.id)
		}
	}
	t.st.mu.Unlock()
	if !ok {
		return
	}
	d.cancel(context.Canceled)
	t.s.release(1)
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
	t.st.mu.Lock()
	ids := t.acks
	t.acks = nil
	t.st.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if err := t.s.rdb.XAck(ctx, t.name, t.s.cfg.Group, ids...).Err(); err != nil {
		// The entries stay pending; whoever recovers this group's idle entries redelivers them.
		// Acks are flushed every AckInterval: one line per backoff step, not one per flush.
		if step := t.ackOutage.Failed(time.Now()); step.Log {
			t.logger.Error("ack entries", err, watermill.LogFields{"count": len(ids), "tries": step.Tries,
				"failing_for": step.FailingFor.Round(time.Millisecond)})
		}
		return
	}
	if lasted, ended := t.ackOutage.OK(time.Now()); ended {
		t.logger.Debug("acks go through again", watermill.LogFields{"after": lasted.Round(time.Millisecond)})
	}
}

//go:embed levelread.lua
var levelReadSrc string
var levelReadScript = redis.NewScript(levelReadSrc)

// readAbove is the read of a level above others of its family (Config.Levels, see
// Subscriber.checkLocked). It reads up to n entries of t's stream, without blocking. lower holds
// the streams of lower levels, lowest first. If one of them has entries the group was not
// delivered yet, it reads nothing and returns that stream.
func (t *topic) readAbove(ctx context.Context, n int, lower []string) ([]redis.XStream, string, error) {
	cfg := t.s.cfg
	v, err := levelReadScript.Run(ctx, t.s.rdb, append([]string{t.name}, lower...), cfg.Group, cfg.Consumer, n).Result()
	if err != nil {
		return nil, "", err
	}
	if k, ok := v.(int64); ok {
		if k < 1 || int(k) > len(lower) {
			return nil, "", fmt.Errorf("stream: levelread.lua answered %d for %d lower levels", k, len(lower))
		}
		return nil, lower[k-1], nil
	}
	res, err := xStreams(v)
	return res, "", err
}

// xStreams decodes an XREADGROUP reply returned by a script (nested arrays).
func xStreams(v any) ([]redis.XStream, error) {
	bad := fmt.Errorf("stream: unexpected read reply %T", v)
	streams, ok := v.([]any)
	if !ok {
		return nil, bad
	}
	out := make([]redis.XStream, 0, len(streams))
	for _, sv := range streams {
		pair, ok := sv.([]any)
		if !ok || len(pair) != 2 {
			return nil, bad
		}
		name, _ := pair[0].(string)
		entries, ok := pair[1].([]any)
		if !ok {
			return nil, bad
		}
		xs := redis.XStream{Stream: name, Messages: make([]redis.XMessage, 0, len(entries))}
		for _, ev := range entries {
			e, ok := ev.([]any)
			if !ok || len(e) != 2 {
				return nil, bad
			}
			id, _ := e[0].(string)
			m := redis.XMessage{ID: id}
			if fields, ok := e[1].([]any); ok {
				m.Values = make(map[string]any, len(fields)/2)
				for i := 0; i+1 < len(fields); i += 2 {
					f, _ := fields[i].(string)
					m.Values[f] = fields[i+1]
				}
			}
			xs.Messages = append(xs.Messages, m)
		}
		out = append(out, xs)
	}
	return out, nil
}
