package leaktest

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// parked runs a goroutine blocked in parkedHere until the returned func releases it, and
// waits until it is parked.
func parked(t *testing.T) (release func()) {
	t.Helper()
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go parkedHere(started, stop, done)
	<-started
	var once sync.Once
	release = func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(release)
	return release
}

func parkedHere(started, stop, done chan struct{}) {
	defer close(done)
	close(started)
	<-stop
}

const parkedFunc = "github.com/conveyorq/conveyor/internal/leaktest.parkedHere"

// A goroutine started after IgnoreCurrent is a leak, named with its stack, until it ends;
// IgnoreFunction of a function on its stack ignores it. Not parallel: other tests' goroutines
// would be leaks here.
func TestFind(t *testing.T) {
	before := IgnoreCurrent()
	if err := Find(before); err != nil {
		t.Fatalf("nothing started, yet: %v", err)
	}
	release := parked(t)
	err := findParked(before)
	if err == nil || !strings.Contains(err.Error(), parkedFunc) || !strings.Contains(err.Error(), "chan receive") {
		t.Fatalf("the parked goroutine not found: %v", err)
	}
	if err := Find(before, IgnoreFunction(parkedFunc)); err != nil {
		t.Fatalf("an ignored function's goroutine reported: %v", err)
	}
	if err := Find(IgnoreCurrent()); err != nil {
		t.Fatalf("a goroutine alive at IgnoreCurrent reported: %v", err)
	}
	release()
	// release returns once the goroutine closed done, which may be before it exits: look
	// until it has (find), as Verify does.
	if err := find(time.Now().Add(wait), []Option{before}); err != nil {
		t.Fatalf("after the goroutine ended: %v", err)
	}
}

// findParked is Find once the goroutine of parked is parked on its channel. It says it started
// just before it parks, so a loaded machine may show it runnable still: a single look failed
// so in CI ("in state runnable"). It looks again until the report names the receive, for at
// most a minute.
func findParked(before Option) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := Find(before)
		if err == nil || strings.Contains(err.Error(), "chan receive") || time.Now().After(deadline) {
			return err
		}
		runtime.Gosched()
	}
}

// find waits for a goroutine that ends by itself, and gives up at its deadline on one that
// does not.
func TestFindWaits(t *testing.T) {
	before := IgnoreCurrent()
	release := parked(t)
	if err := find(time.Now().Add(20*time.Millisecond), []Option{before}); err == nil {
		t.Fatal("a goroutine parked past the deadline not reported")
	}
	ending := make(chan struct{})
	go func() {
		<-ending
		release()
	}()
	close(ending)
	if err := find(time.Now().Add(wait), []Option{before}); err != nil {
		t.Fatalf("a goroutine that ends was reported: %v", err)
	}
}

// The testing package's own goroutines, a subtest's parent among them, are not leaks. The
// parent is runnable until it parks in t.Run's wait, which a loaded machine delays (a single
// look, Find, failed so in CI), so the check looks until it parks, as Verify does.
func TestTestingGoroutinesIgnored(t *testing.T) {
	t.Run("sub", func(t *testing.T) {
		if err := find(time.Now().Add(wait), nil); err != nil {
			t.Fatalf("the test binary's own goroutines reported: %v", err)
		}
	})
}

func TestParse(t *testing.T) {
	t.Parallel()
	dump := "goroutine 7 [chan receive, 2 minutes]:\n" +
		"example.com/p.(*T).wait(0xc000010000)\n\t/src/p/t.go:12 +0x25\n" +
		"...additional frames elided...\n" +
		"example.com/p.run.func1()\n\t/src/p/run.go:30 +0x1d\n" +
		"created by example.com/p.start in goroutine 1\n\t/src/p/run.go:29 +0x66\n\n" +
		"goroutine 1 gp=0xc000002380 m=0 mp=0x1 [running]:\nmain.main()\n\t/src/main.go:5 +0x1\n"
	got := parse([]byte(dump))
	if len(got) != 2 {
		t.Fatalf("%d stacks, want 2", len(got))
	}
	s := got[0]
	if s.id != 7 || s.state != "chan receive, 2 minutes" || s.first != "example.com/p.(*T).wait" {
		t.Fatalf("stack %+v", s)
	}
	if !s.has("example.com/p.run.func1") || s.has("example.com/p.start") {
		t.Fatalf("functions %v: the creator is not on the stack", s.funcs)
	}
	if got[1].id != 1 || got[1].state != "running" || got[1].first != "main.main" {
		t.Fatalf("stack %+v", got[1])
	}
}
