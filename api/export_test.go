package api

import "context"

// Waiting returns how many long polls wait now.
func (s *Server) Waiting() int { return s.waits.waiting() }

// Routes returns every route as "METHOD pattern".
func (s *Server) Routes() []string {
	out := make([]string, len(s.routes))
	for i, rt := range s.routes {
		out[i] = rt.method + " " + rt.pattern
	}
	return out
}

// SampleThroughput takes one throughput sample now.
func (s *Server) SampleThroughput() { s.sampler.sample(context.Background()) }

// ThroughputQueues returns the most queues one retained throughput sample holds.
func (s *Server) ThroughputQueues() int {
	s.sampler.mu.Lock()
	defer s.sampler.mu.Unlock()
	n := 0
	for _, snap := range s.sampler.ring {
		n = max(n, len(snap.names))
	}
	return n
}

// ParseEventsQuery is parseEventsQuery, reporting the heartbeat it read.
func ParseEventsQuery(q map[string][]string) (heartbeat int64, err error) {
	e, err := parseEventsQuery(q)
	return int64(e.heartbeat), err
}

// UntilParam is untilParam.
func UntilParam(q map[string][]string) (bool, error) { return untilParam(q) }
