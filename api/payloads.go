package api

import (
	"net/http"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// How a request sees payloads and results under Config.Keys. The Client the server was given
// reads jobs as stored (sealed); a request with the PayloadToken gets them opened, any other
// gets them sealed, the plaintext a publish sends back included. Both work on copies: a job a
// long poll hands to several requests is shared.

// openJob is j with its sealed parts opened with the server's keys, where they open.
func (s *Server) openJob(j *pipeline.Job) *pipeline.Job {
	if j == nil {
		return nil
	}
	if sp, sr := j.Sealed(); !sp && !sr {
		return j
	}
	c := *j
	_ = c.Open(s.cfg.Keys) // a part sealed under a key the server lacks stays sealed, shown so
	return &c
}

// hideJob is j with its plaintext parts sealed, so that the JSON shows them as
// "<encrypted, N bytes, key K>": a publish's answer carries the plaintext the caller sent, a
// job stored before encryption was turned on carries its own.
func (s *Server) hideJob(j *pipeline.Job) *pipeline.Job {
	if j == nil || (len(j.Payload) == 0 || keyring.Sealed(j.Payload)) && (len(j.Result) == 0 || keyring.Sealed(j.Result)) {
		return j
	}
	c := *j
	if len(c.Payload) > 0 {
		c.Payload = s.cfg.Keys.Seal(keyring.Payload, c.ID, c.Payload)
	}
	if len(c.Result) > 0 {
		c.Result = s.cfg.Keys.Seal(keyring.Result, c.ID, c.Result)
	}
	return &c
}

// viewJobs applies f to the jobs of an answer. An answer of a type it does not know is left
// as it is: read through the server's Client, its jobs are sealed.
func viewJobs(v any, f func(*pipeline.Job) *pipeline.Job) any {
	switch b := v.(type) {
	case *pipeline.Job:
		return f(b)
	case publishedJob:
		b.job = f(b.job)
		return b
	case jobsBody:
		b.Jobs = mapJobs(b.Jobs, f)
		return b
	case *pipeline.JobPage:
		if b == nil {
			return b
		}
		c := *b
		c.Jobs = mapJobs(b.Jobs, f)
		return &c
	}
	return v
}

func mapJobs(js []*pipeline.Job, f func(*pipeline.Job) *pipeline.Job) []*pipeline.Job {
	out := make([]*pipeline.Job, len(js))
	for i, j := range js {
		out[i] = f(j)
	}
	return out
}

// viewLogs shows a job's log lines under Config.Keys as its payload is shown: opened (where the
// server has their key) to a request with the PayloadToken, sealed to any other, lines stored
// before encryption was turned on included. A handler may log what its payload holds.
func (s *Server) viewLogs(w http.ResponseWriter, id string, logs []pipeline.AttemptLog) {
	rec, ok := w.(*recorder)
	if !ok || s.cfg.Keys == nil {
		return
	}
	for n := range logs {
		if rec.payload {
			_ = logs[n].Open(s.cfg.Keys, id) // lines under a key the server lacks stay sealed, shown so
		} else {
			logs[n].Seal(s.cfg.Keys, id)
		}
	}
}
