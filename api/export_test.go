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
