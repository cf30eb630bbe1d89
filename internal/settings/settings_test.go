package settings

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

var errInvalid = errors.New("invalid")

var bounds = Bounds{MaxPartitions: 8, MaxRetries: 10, MaxTimeout: time.Hour, Invalid: errInvalid}

// A patch's wire form refuses unknown fields and timeouts out of bounds, with the caller's error.
func TestDecodePatch(t *testing.T) {
	p, err := DecodePatch([]byte(`{"paused":true,"timeout_ms":1500}`), bounds)
	if err != nil || p.Paused == nil || !*p.Paused || *p.Timeout != 1500*time.Millisecond {
		t.Fatalf("DecodePatch = %+v, %v", p, err)
	}
	if _, err := DecodePatch([]byte(`{"pause":true}`), bounds); err == nil {
		t.Fatal("an unknown field passed")
	}
	if _, err := DecodePatch([]byte(`{"timeout_ms":3600001}`), bounds); !errors.Is(err, errInvalid) {
		t.Fatalf("a timeout past the bound: %v", err)
	}
}

// The record change sets what is given, deletes what is removed, and is nothing otherwise.
func TestRecordChange(t *testing.T) {
	n, zero := -1, time.Duration(0)
	c, ok := Patch{MaxRetries: &n, Timeout: &zero}.RecordChange()
	if !ok || len(c.Delete) != 2 || len(c.Set) != 0 {
		t.Fatalf("removal: %+v %v", c, ok)
	}
	if _, ok := (Patch{}).RecordChange(); ok {
		t.Fatal("an empty patch changed the record")
	}
	if !(Patch{Paused: new(bool)}).PauseOnly() || (Patch{Concurrency: &n}).PauseOnly() {
		t.Fatal("PauseOnly")
	}
}

// StoreErr swaps the store's sentinel for the caller's, in the text and for errors.Is.
func TestStoreErr(t *testing.T) {
	busy := errors.New("pipeline: queue busy")
	err := StoreErr(fmt.Errorf("create queue q: %w", jobstate.ErrBusy), busy, errInvalid)
	if !errors.Is(err, busy) || !errors.Is(err, jobstate.ErrBusy) || err.Error() != "create queue q: "+busy.Error() {
		t.Fatalf("StoreErr = %v", err)
	}
}
