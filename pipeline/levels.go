package pipeline

import (
	"github.com/conveyorq/conveyor/internal/keys"
)

// levels is the subscriber's stream.Config.Levels: the level streams of one queue (of one
// partition) are a family, read in level order.
func (w *Worker) levels(streamKey string) (string, int) {
	q, ok := w.queue(streamKey)
	if !ok {
		return "", 0
	}
	return q.LevelStream(keys.MinPriority), q.Level()
}

// levelViews adds to queues the views of q at every level above 1 (keys.Queue.AtLevel), by
// their stream keys. So a message of a level stream finds its queue.
func levelViews(queues map[string]*keys.Queue, q keys.Queue) {
	for level := keys.MinPriority + 1; level <= keys.MaxPriority; level++ {
		v := q.AtLevel(level)
		queues[v.Stream()] = &v
	}
}
