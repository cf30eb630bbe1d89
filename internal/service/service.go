// Package service gives a worker's background parts one shape: the delayed scheduler, the
// recoverers, the partition watcher, and later cron, pause watchers and rate-limit refills. So
// the worker starts them from a list and stops them in reverse. Adding one is a file and a list
// entry, not a flag, a goroutine and a log line in the worker. River's maintenance services and
// startstop package are the model.
package service

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Service is one background part of a worker.
type Service interface {
	// Name names the service in logs.
	Name() string
	// Start launches the service's work on goroutines of its own and returns at once; the
	// work ends at Stop or when ctx ends. An error means it could not start and runs nothing.
	Start(ctx context.Context) error
	// Stop ends the work and returns once it has ended. It does nothing for a service never
	// started, or stopped already.
	Stop()
}

// Loop implements Start and Stop for a service whose work is one function that runs until its
// context ends. A service embeds it in an unexported field, and calls it from its own Start and
// Stop.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run on a new goroutine with a context that ends at Stop or with ctx. It reports
// false, running nothing, when the loop runs already.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return false
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		run(ctx)
	}(l.done)
	return true
}

// Stop ends the context of the running function and waits for it to return; then the loop may
// start again.
func (l *Loop) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		return
	}
	l.cancel()
	<-l.done
	l.cancel, l.done = nil, nil
}

// StartAll starts services in list order. It returns a function that stops them in reverse
// order, each Stop returning before the next begins. So a service may rely on those listed
// before it running for as long as it does. When one fails to start, those started are stopped,
// in reverse. Its error is returned, naming it.
func StartAll(ctx context.Context, services ...Service) (stopAll func(), err error) {
	for k, s := range services {
		if err := s.Start(ctx); err != nil {
			stopReverse(services[:k])
			return nil, fmt.Errorf("start the %s: %w", s.Name(), err)
		}
	}
	var once sync.Once
	return func() { once.Do(func() { stopReverse(services) }) }, nil
}

func stopReverse(services []Service) {
	for k := len(services) - 1; k >= 0; k-- {
		services[k].Stop()
	}
}

// Every calls f every d until ctx ends: the body of a Loop whose work is a periodic check
// (pipeline's limits and levels watchers). The first call is d after the start.
func Every(ctx context.Context, d time.Duration, f func(ctx context.Context)) {
	EveryOr(ctx, d, nil, f)
}

// EveryOr is Every that also calls f at once whenever kick delivers (pipeline's lease keeper,
// kicked when a slot should go back now); a nil kick never does.
func EveryOr(ctx context.Context, d time.Duration, kick <-chan struct{}, f func(ctx context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		f(ctx)
	}
}
