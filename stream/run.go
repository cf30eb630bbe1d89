package stream

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// runners runs the messages of a Subscriber with Config.Run. Each runs on a goroutine kept
// for the next message. So a message costs one hand-off from the reader, not a new goroutine,
// its stack's growth and two more hand-offs as with Watermill's router.
type runners struct {
	run    func(*message.Message)
	logger watermill.LoggerAdapter
	// work is unbuffered: a send goes through only to a runner waiting between messages.
	work chan *message.Message
	max  int

	mu    sync.Mutex
	n     int  // runners started
	ended bool // work is closed
	wg    sync.WaitGroup
	done  chan struct{} // closed when every runner returned, after end
}

// runGrace is how long Close waits, after the subscriptions ended, for Run calls to return.
// Their contexts were cancelled by then; a router gives its handlers about as long.
const runGrace = time.Second

func newRunners(run func(*message.Message), max int, logger watermill.LoggerAdapter) *runners {
	return &runners{run: run, logger: logger, work: make(chan *message.Message), max: max, done: make(chan struct{})}
}

// submit runs msg on a waiting runner, or a new one while fewer than max run. Past that it
// waits for one: at most max messages are held, so a busy runner's message has settled and it
// is on its way back.
func (r *runners) submit(msg *message.Message) {
	select {
	case r.work <- msg:
		return
	default:
	}
	r.mu.Lock()
	if r.n < r.max {
		r.n++
		r.wg.Add(1)
		r.mu.Unlock()
		go r.loop(msg)
		return
	}
	r.mu.Unlock()
	r.work <- msg
}

func (r *runners) loop(msg *message.Message) {
	defer r.wg.Done()
	for ok := true; ok; msg, ok = r.next() {
		r.runOne(msg)
	}
}

// next waits for the runner's next message with a deep stack. The GC halves the stack of a
// goroutine that uses under a quarter of it; a runner waiting shallow would lose the stack a
// message grew, and grow it again (a copy) for the next, after every GC cycle. The pad holds
// no pointers, so the GC's scan of the waiting runner skips it.
//
//go:noinline
func (r *runners) next() (*message.Message, bool) {
	var pad [runnerPad]byte
	keepOnStack(pad[:])
	msg, ok := <-r.work
	return msg, ok
}

// runnerPad is the stack a waiting runner holds: a quarter of 16 KiB. A Conveyor job's path
// stays within that (a profile of bench's cmdcount shows no stack copies with it).
const runnerPad = 4096

//go:noinline
func keepOnStack([]byte) {}

// runOne runs msg. A panic is logged, the message nacked and the runner goes on, as a
// router's handler does.
func (r *runners) runOne(msg *message.Message) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error("Panic recovered in handler. Stack: "+string(debug.Stack()),
				fmt.Errorf("%v", p), watermill.LogFields{"message_uuid": msg.UUID})
			msg.Nack()
		}
	}()
	r.run(msg)
}

// end stops the runners once they are between messages; nothing is submitted afterwards. It
// waits up to runGrace for them to return.
func (r *runners) end() {
	r.mu.Lock()
	if !r.ended {
		r.ended = true
		close(r.work)
		go func() {
			r.wg.Wait()
			close(r.done)
		}()
	}
	r.mu.Unlock()
	t := time.NewTimer(runGrace)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
	}
}

// routerKeys are the keys of the values Watermill's router adds to the context of each message
// it hands a handler: those message.HandlerNameFromCtx, PublisherNameFromCtx,
// SubscriberNameFromCtx and SubscribeTopicFromCtx read. They are unexported, so they are found
// by asking for them.
var routerKeys = func() (keys [4]any) {
	for i, read := range []func(context.Context) string{message.HandlerNameFromCtx, message.PublisherNameFromCtx,
		message.SubscriberNameFromCtx, message.SubscribeTopicFromCtx} {
		p := &keyProbe{Context: context.Background()}
		read(p)
		keys[i] = p.key
	}
	return keys
}()

// keyProbe records the key it is asked for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// consumerPublisher is the publisher name a router gives a handler added by AddConsumerHandler:
// its stand-in publisher's type.
const consumerPublisher = "message.disabledPublisher"

// routerValues are a topic's answers to routerKeys, boxed once.
type routerValues [4]any

// newRouterValues are the values a router's consumer handler named handler, subscribed to
// topic through s, adds to its messages' contexts.
func newRouterValues(s *Subscriber, handler, topic string) *routerValues {
	return &routerValues{handler, consumerPublisher, strings.TrimLeft(fmt.Sprintf("%T", s), "*"), topic}
}

// value answers key if it is one of routerKeys; a router sets only the names that are not
// empty.
func (v *routerValues) value(key any) (any, bool) {
	for i, k := range routerKeys {
		if key == k {
			if v[i] == "" {
				return nil, false
			}
			return v[i], true
		}
	}
	return nil, false
}
