package inspect

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// PauseAckRecheck is how often Pause reads the confirmations stored while it waits for their
// notices (keys.PauseAckChannel). A notice lost with a connection costs that much delay, and an
// idle wait of the full 5 s ten reads.
const PauseAckRecheck = 500 * time.Millisecond

// Pause sets queue's pause under token and waits up to timeout for workers (the live ones
// reading it, by name) to confirm it. It returns those that did not, in workers' order.
// Waiting ends early when ctx does. rdb reads the confirmations stored.
func (e *Engine) Pause(ctx context.Context, rdb redis.UniversalClient, queue, token string, workers []string, timeout time.Duration) ([]string, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Subscribed, and the subscription confirmed, before the pause is announced, so that no
	// confirmation's notice comes before it. Without it (a Redis that refuses SUBSCRIBE), the
	// wait reads the confirmations every PauseAckRecheck alone.
	var notices <-chan *redis.Message
	if len(workers) > 0 {
		if ps, err := e.store.SubscribePauseAcks(wctx); err == nil {
			defer ps.Close()
			notices = ps.Channel()
		}
	}
	yes := true
	if _, err := e.store.UpdateSettings(ctx, queue, jobstate.SettingsChange{Paused: &yes, Token: token}); err != nil {
		return nil, fmt.Errorf("pause queue %s: %w", queue, err)
	}
	if len(workers) == 0 {
		return workers, nil
	}
	confirmed := map[string]bool{}
	unconfirmed := func() []string {
		return slices.DeleteFunc(slices.Clone(workers), func(w string) bool { return confirmed[w] })
	}
	// read merges the confirmations stored: the state, of which the notices are hints.
	read := func(ctx context.Context) {
		acks, err := jobstate.PauseAcks(ctx, rdb, e.prefix, queue)
		if err != nil {
			return
		}
		for w, t := range acks {
			if t == token {
				confirmed[w] = true
			}
		}
	}
	recheck := time.NewTicker(PauseAckRecheck)
	defer recheck.Stop()
	for {
		left := unconfirmed()
		if len(left) == 0 {
			return left, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() == nil {
				// Time is up: a last read, so that a confirmation whose notice was lost counts.
				rctx, rcancel := context.WithTimeout(ctx, PauseAckRecheck)
				read(rctx)
				rcancel()
				left = unconfirmed()
			}
			return left, nil
		case m, ok := <-notices:
			if !ok {
				notices = nil
				continue
			}
			if t, w := jobstate.PauseAckNotice(m.Payload); t == token {
				confirmed[w] = true
			}
		case <-recheck.C:
			read(wctx)
		}
	}
}
