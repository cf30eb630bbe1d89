package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingProducer keeps every payload EnqueueOne is given.
type recordingProducer struct {
	Producer // nil: only EnqueueOne is called
	mu       sync.Mutex
	payloads [][]byte
}

func (p *recordingProducer) EnqueueOne(_ context.Context, payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.payloads = append(p.payloads, payload)
	return nil
}

// TestOpenloopPublish checks the schedule: every job is sent once, the warm-up ones carry no
// time, and the measured ones carry t0 + i/rate exactly (intended times, not send times).
func TestOpenloopPublish(t *testing.T) {
	const rate, warm, total = 2000, 40, 200
	p := &recordingProducer{}
	st, err := openloopPublish(context.Background(), p, rate, warm, total, 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.payloads) != total {
		t.Fatalf("%d sends, want %d", len(p.payloads), total)
	}
	var due []time.Time
	for _, pl := range p.payloads {
		if len(pl) != 64 {
			t.Errorf("payload of %d bytes, want 64", len(pl))
		}
		at, ok := parseDue(pl)
		if !ok {
			continue
		}
		due = append(due, at)
		// The send time is taken at or after the intended time (the pacer never sends early).
		if sent, ok := parseSent(pl); !ok || sent.Before(at) {
			t.Errorf("payload %q: send time %v, %v; intended %v", pl, sent, ok, at)
		}
	}
	if len(due) != total-warm {
		t.Fatalf("%d payloads carry a time, want %d", len(due), total-warm)
	}
	slices.SortFunc(due, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(due); i++ {
		if d := due[i].Sub(due[i-1]); d != time.Second/rate {
			t.Fatalf("intended times %d and %d are %v apart, want %v", i-1, i, d, time.Second/rate)
		}
	}
	if st.late < 0 || st.late > total-warm || st.took <= 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestOpenloopFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(o options) bool
	}{
		{"defaults", nil, "", func(o options) bool {
			return slices.Equal(o.ol.rates, []int{100, 1000, 10000}) && o.ol.seconds == 10 &&
				o.ol.warmup == time.Second && !slices.Contains(o.workloads, openloopPrefix) && len(o.workloads) == 5
		}},
		{"openloop only", []string{"-workloads", "openloop", "-openloop-rates", "50,500", "-openloop-seconds", "2.5"}, "", func(o options) bool {
			return slices.Equal(o.workloads, []string{"openloop"}) && slices.Equal(o.ol.rates, []int{50, 500}) && o.ol.seconds == 2.5
		}},
		{"unknown workload", []string{"-workloads", "e2e,soak"}, "unknown workload", nil},
		{"no workload", []string{"-workloads", ","}, "none selected", nil},
		{"bad rate", []string{"-openloop-rates", "0"}, "-openloop-rates", nil},
		{"no seconds", []string{"-openloop-seconds", "0"}, "-openloop-seconds", nil},
		{"no publishers", []string{"-openloop-publishers", "0"}, "-openloop-publishers", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(o) {
				t.Errorf("options = %+v", o)
			}
		})
	}
}

// TestOpenloopReport checks the per-rate tables (every variant a row) and the target.
func TestOpenloopReport(t *testing.T) {
	o := options{rounds: 1, systems: []string{"conveyor", "asynq"}, asynqConc: []int{10, 50},
		ol: openloopOptions{seconds: 10, warmup: time.Second, publishers: 16}}
	for _, tc := range []struct {
		name     string
		p99      float64
		pass     bool
		verdict  string
		withRate bool
	}{
		{"met", 2.5, true, "2.50 ms, met", true},
		{"not met", 7, false, "7.00 ms, **not met**", true},
		{"rate not run", 0, false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := newResults()
			rate := "100"
			if tc.withRate {
				rate = "1000"
			}
			for _, v := range []string{"conveyor", "asynq_c10", "asynq_c50"} {
				res.add(v, 1, map[string]float64{"openloop_" + rate + "_p50_ms": 1, "openloop_" + rate + "_p99_ms": tc.p99,
					"openloop_" + rate + "_samples": 10000})
			}
			rep := buildReport(o, machineFacts{}, res)
			var found *target
			for i := range rep.Targets {
				if rep.Targets[i].Name == "conveyor openloop_1000_p99_ms" {
					found = &rep.Targets[i]
				}
			}
			if tc.withRate != (found != nil) {
				t.Fatalf("target present = %v, want %v (targets %+v)", found != nil, tc.withRate, rep.Targets)
			}
			if found != nil && (found.Pass != tc.pass || found.Bound != openloopTargetP99MS) {
				t.Errorf("target = %+v", *found)
			}
			var b bytes.Buffer
			writeMarkdown(&b, rep)
			out := b.String()
			for _, v := range []string{"| conveyor |", "| asynq_c10 |", "| asynq_c50 |"} {
				if !strings.Contains(out, v) {
					t.Errorf("no row %q in\n%s", v, out)
				}
			}
			if tc.verdict != "" && !strings.Contains(out, tc.verdict) {
				t.Errorf("no verdict %q in\n%s", tc.verdict, out)
			}
			if strings.Contains(out, "## Results") {
				t.Errorf("an empty results table printed:\n%s", out)
			}
		})
	}
}
