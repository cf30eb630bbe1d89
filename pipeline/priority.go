package pipeline

// priority is the subscriber's stream.Config.Priority of WorkerConfig.QueueWeights and
// StrictPriority: a stream's class is its queue, weighted by QueueWeights (1 when missing).
// Nil when neither is set: first come, first served.
func (w *Worker) priority() func(string) (string, int) {
	if len(w.cfg.QueueWeights) == 0 && !w.cfg.StrictPriority {
		return nil
	}
	return func(streamKey string) (string, int) {
		q, ok := w.queue(streamKey)
		if !ok {
			return "", 1
		}
		return q.Name(), max(1, w.cfg.QueueWeights[q.Name()])
	}
}
