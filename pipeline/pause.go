package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// defaultPauseCheckInterval is how often a worker reads the paused queues
// (WorkerConfig.PauseCheckInterval).
const defaultPauseCheckInterval = time.Second

// defaultPauseConfirmTimeout is how long Pause waits for the live workers reading the queue to
// confirm the pause (PauseConfirmed).
const defaultPauseConfirmTimeout = 5 * time.Second

// Pause pauses queue and waits, up to 5 s, until every live worker
// that reads it (Workers) has confirmed. A worker confirms once it has paused the queue's
// streams and its reads of them under way have ended. So it starts no job published after
// Pause returns until Resume. Jobs read before that (running, or read and about to start) go
// on as usual. Queued jobs stay queued. Scheduled and retried jobs are still promoted when
// due, and wait, queued, for Resume. Recovery goes on. Nothing is lost. The state lives in
// Redis (the queue's settings record, UpdateQueue), shared by every worker and kept across
// restarts. A worker started on a paused queue takes nothing from it. Workers learn of the
// change from a Pub/Sub notice at once. Should the notice be missed, they read the records
// every PauseCheckInterval (1 s). They then stop reading within that second and a read, but
// confirm nothing. Pause returns nil whether or not every worker confirmed; PauseConfirmed
// says which did not. Pausing a paused queue changes nothing and waits for the confirmations
// alike. A queue that does not exist (QueueExists) is ErrQueueNotFound.
func (i *Inspector) Pause(ctx context.Context, queue string) error {
	_, err := i.PauseConfirmed(ctx, queue, defaultPauseConfirmTimeout)
	return err
}

// PauseConfirmation is what PauseConfirmed found. It names the live workers that read the
// queue when the pause was set (by name, sorted), and those of them that did not confirm it in
// time. Such a worker stopped without removing its record, missed the notice, or was too busy
// to answer. It stops reading the queue within PauseCheckInterval of reading the set.
type PauseConfirmation struct {
	Workers     []string
	Unconfirmed []string
}

// PauseConfirmed is Pause waiting up to timeout (at least a millisecond) for the
// confirmations, and telling which live workers reading the queue did not confirm. Waiting
// ends early when ctx does (the pause is set; the workers not heard from yet are Unconfirmed).
//
// Why confirmations rather than a check at the read in Redis? A worker's idle read of a queue
// is a blocking XREADGROUP, which no script can make conditional. Sent before the pause, it
// hands out a job published after it. Checking the pause in Redis after every read would add
// a round trip per read batch to every queue. A confirmation costs only the pause.
func (i *Inspector) PauseConfirmed(ctx context.Context, queue string, timeout time.Duration) (PauseConfirmation, error) {
	var pc PauseConfirmation
	if timeout < time.Millisecond {
		return pc, invalid("pause confirmation timeout %v: it must be at least 1ms", timeout)
	}
	if err := i.mustExist(ctx, queue); err != nil {
		return pc, err
	}
	readers, err := i.QueueReaders(ctx, queue)
	if err != nil {
		return pc, fmt.Errorf("pause queue %s: %w", queue, err)
	}
	for _, w := range readers {
		pc.Workers = append(pc.Workers, w.Name)
	}
	pc.Unconfirmed, err = i.eng.Pause(ctx, i.rdb, queue, NewID(), pc.Workers, timeout)
	return pc, err
}

// Resume undoes Pause: workers read queue again, within one read of the change. Resuming a
// queue that is not paused does nothing. A queue that does not exist is ErrQueueNotFound,
// unless it is paused (a queue deleted while paused can be resumed).
func (i *Inspector) Resume(ctx context.Context, queue string) error {
	if err := i.check(queue, ""); err != nil {
		return err
	}
	no := false
	ch, err := i.store.UpdateSettings(ctx, queue, jobstate.SettingsChange{Paused: &no})
	if err != nil {
		return fmt.Errorf("resume queue %s: %w", queue, err)
	}
	if ch.WasPaused {
		return nil
	}
	return i.mustExist(ctx, queue)
}

// Paused returns the names of the paused queues, sorted.
func (i *Inspector) Paused(ctx context.Context) ([]string, error) {
	set, err := jobstate.PausedQueues(ctx, i.rdb, i.cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("read the paused queues: %w", err)
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// mustExist returns ErrQueueNotFound (wrapped, naming queue) for a queue that does not exist.
func (i *Inspector) mustExist(ctx context.Context, queue string) error {
	ok, err := i.QueueExists(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("queue %s: %w", queue, ErrQueueNotFound)
	}
	return nil
}
