package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/service"
)

// fake records its starts and stops into a shared log; it runs a Loop until stopped.
type fake struct {
	name    string
	failing error
	log     *events
	loop    service.Loop
	running chan struct{} // closed once the loop's function runs
}

type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, s)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

func (f *fake) Name() string { return f.name }

func (f *fake) Start(ctx context.Context) error {
	if f.failing != nil {
		return f.failing
	}
	f.running = make(chan struct{})
	f.log.add("start " + f.name)
	f.loop.Start(ctx, func(ctx context.Context) {
		close(f.running)
		<-ctx.Done()
		f.log.add("stopped " + f.name)
	})
	return nil
}

func (f *fake) Stop() { f.loop.Stop() }

type testBundle struct {
	log *events
}

func setup(t *testing.T, names ...string) ([]*fake, *testBundle) {
	t.Helper()
	b := &testBundle{log: &events{}}
	fakes := make([]*fake, len(names))
	for k, n := range names {
		fakes[k] = &fake{name: n, log: b.log}
	}
	return fakes, b
}

func asServices(fakes []*fake) []service.Service {
	out := make([]service.Service, len(fakes))
	for k, f := range fakes {
		out[k] = f
	}
	return out
}

func TestStartAllStartsInOrderAndStopsInReverse(t *testing.T) {
	fakes, b := setup(t, "a", "b", "c")
	stop, err := service.StartAll(t.Context(), asServices(fakes)...)
	require.NoError(t, err)
	for _, f := range fakes {
		<-f.running
	}
	stop()
	stop() // a second call does nothing
	require.Equal(t, []string{"start a", "start b", "start c", "stopped c", "stopped b", "stopped a"}, b.log.list())
}

func TestStartAllStopsTheStartedOnesWhenOneFails(t *testing.T) {
	fakes, b := setup(t, "a", "b", "c")
	boom := errors.New("boom")
	fakes[1].failing = boom
	stop, err := service.StartAll(t.Context(), asServices(fakes)...)
	require.ErrorIs(t, err, boom)
	require.Nil(t, stop)
	require.Equal(t, []string{"start a", "stopped a"}, b.log.list(), "c never started")
}

func TestServicesEndWithTheirContext(t *testing.T) {
	fakes, b := setup(t, "a")
	ctx, cancel := context.WithCancel(t.Context())
	stop, err := service.StartAll(ctx, asServices(fakes)...)
	require.NoError(t, err)
	<-fakes[0].running
	cancel()
	stop() // waits for the function, which ended with ctx
	require.Equal(t, []string{"start a", "stopped a"}, b.log.list())
}

func TestLoop(t *testing.T) {
	var l service.Loop
	l.Stop() // never started: nothing to do
	runs := make(chan struct{}, 2)
	run := func(ctx context.Context) { runs <- struct{}{}; <-ctx.Done() }
	require.True(t, l.Start(t.Context(), run))
	require.False(t, l.Start(t.Context(), run), "it runs already")
	<-runs
	l.Stop()
	l.Stop()
	require.True(t, l.Start(t.Context(), run), "a stopped loop starts again")
	<-runs
	l.Stop()
	require.Empty(t, runs)
}

// Every calls f on each tick with its own context and returns once that context ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		service.Every(ctx, time.Millisecond, func(c context.Context) {
			if c != ctx {
				t.Error("f got another context")
			}
			select {
			case calls <- struct{}{}:
			case <-c.Done():
			}
		})
	}()
	<-calls
	<-calls
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
}
