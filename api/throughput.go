package api

import (
	"math"
	"net/http"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// rate is one point of the chart: per-second rates over the bucket that ends at T. It adds the
// queue wait and execution time percentiles of the bucket's attempts, absent when it had none.
type rate struct {
	T         int64   `json:"t"`
	Completed float64 `json:"completed"`
	Failed    float64 `json:"failed"`
	Retried   float64 `json:"retried"`
	latencyMS
}

// latencyMS is a pipeline.Latency pair in milliseconds, absent (0) without attempts.
type latencyMS struct {
	WaitP50 float64 `json:"wait_p50_ms,omitempty"`
	WaitP99 float64 `json:"wait_p99_ms,omitempty"`
	ExecP50 float64 `json:"exec_p50_ms,omitempty"`
	ExecP99 float64 `json:"exec_p99_ms,omitempty"`
}

func latencyOf(p pipeline.HistoryPoint) latencyMS {
	return latencyMS{WaitP50: ms(p.Wait.P50), WaitP99: ms(p.Wait.P99), ExecP50: ms(p.Exec.P50), ExecP99: ms(p.Exec.P99)}
}

// ms is d in milliseconds, to the hundredth: the histogram is good to 9%.
func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }

// throughputTotal sums the window: counts, not rates, and the percentiles of every attempt.
type throughputTotal struct {
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Retried   int64 `json:"retried"`
	latencyMS
}

// throughputBody is the JSON of GET /v1/throughput.
type throughputBody struct {
	IntervalSeconds float64         `json:"interval_seconds"`
	WindowSeconds   float64         `json:"window_seconds"`
	Queue           string          `json:"queue,omitempty"`
	Resolution      string          `json:"resolution"`
	Samples         []rate          `json:"samples"`
	Total           throughputTotal `json:"total"`
}

// resolutions are the values of ?resolution=, with the longest window each keeps.
var resolutions = map[string]struct{ step, span time.Duration }{
	"5s": {pipeline.HistoryStepFine, historySpanFine},
	"1m": {pipeline.HistoryStepCoarse, historySpanCoarse},
}

// throughput: GET /v1/throughput[?queue=Q][&resolution=5s|1m][&window=D]. It reads the history
// the workers keep in Redis (pipeline.Inspector.History), so a server started after the jobs ran
// shows them. It answers per-second rates of each bucket, the queue wait and execution time
// percentiles, and the window's total. The window defaults to Config.ThroughputWindow at 5 s,
// and to a day at 1 min. It is cut to what the resolution keeps.
func (s *Server) throughput(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	queue := q.Get("queue")
	res := q.Get("resolution")
	if res == "" {
		res = "5s"
	}
	rs, ok := resolutions[res]
	if !ok {
		return badArg("resolution %q: want 5s or 1m", res)
	}
	window := rs.span
	if res == "5s" {
		window = s.cfg.ThroughputWindow
	}
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return badArg("window %q: want a positive duration such as 15m or 24h", v)
		}
		window = d
	}
	window = min(window, rs.span)
	if queue != "" {
		ok, err := s.inspector.QueueExists(r.Context(), queue)
		if err != nil {
			return err
		}
		if !ok {
			return errorf(http.StatusNotFound, CodeNotFound, "queue %q not found", queue)
		}
	}
	h, err := s.inspector.History(r.Context(), queue, rs.step, time.Now().Add(-window))
	if err != nil {
		return err
	}
	secs := rs.step.Seconds()
	body := throughputBody{IntervalSeconds: secs, WindowSeconds: window.Seconds(), Queue: queue, Resolution: res,
		Samples: make([]rate, len(h.Points)),
		Total: throughputTotal{Completed: h.Total.Completed, Failed: h.Total.Failed, Retried: h.Total.Retried,
			latencyMS: latencyOf(h.Total)}}
	for i, p := range h.Points {
		body.Samples[i] = rate{T: p.At.Add(rs.step).UnixMilli(), Completed: perSecond(p.Completed, secs),
			Failed: perSecond(p.Failed, secs), Retried: perSecond(p.Retried, secs), latencyMS: latencyOf(p)}
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// perSecond rounds to thousandths: a chart needs no more, and the JSON stays short.
func perSecond(n int64, secs float64) float64 {
	return math.Round(float64(n)/secs*1000) / 1000
}
