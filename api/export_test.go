package api

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

// ParseEventsQuery is parseEventsQuery, reporting the heartbeat it read.
func ParseEventsQuery(q map[string][]string) (heartbeat int64, err error) {
	e, err := parseEventsQuery(q)
	return int64(e.heartbeat), err
}

// UntilParam is untilParam.
func UntilParam(q map[string][]string) (bool, error) { return untilParam(q) }
