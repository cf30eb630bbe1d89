package main

import (
	"reflect"
	"testing"
)

// TestPairedRatios checks that a ratio pairs the runs of one round (a family taking its best
// variant of that round) and takes the median over rounds, and that the ratio of the medians
// is kept beside it.
func TestPairedRatios(t *testing.T) {
	o := options{jobs: 1000, rounds: 3, systems: []string{"conveyor", "asynq", "raw"}, asynqConc: []int{10, 50}}
	res := newResults()
	add := func(v string, metric string, perRound ...float64) {
		for i, x := range perRound {
			res.add(v, i+1, map[string]float64{metric: x})
		}
	}
	// The VM slows down over the run (every system's speed halves); each round pairs its own
	// runs, asynq's best variant of the round.
	add("conveyor", "e2e_jobs_per_s", 400, 300, 200)
	add("asynq_c10", "e2e_jobs_per_s", 100, 50, 40)
	add("asynq_c50", "e2e_jobs_per_s", 80, 75, 40)
	add("raw", "e2e_jobs_per_s", 4000, 3000, 2000)
	// Lower is better: the best variant of a round is the smallest.
	add("conveyor", "peak_rss_mb", 21, 21, 21)
	add("asynq_c10", "peak_rss_mb", 20, 22, 20)
	add("asynq_c50", "peak_rss_mb", 21, 21, 22)

	rep := buildReport(o, machineFacts{}, res)
	tests := []struct {
		name     string
		paired   float64
		perRound []float64
		ofMeds   float64
	}{
		{"e2e_vs_asynq", 4, []float64{4, 4, 5}, 300.0 / 75},
		{"e2e_vs_raw", 0.1, []float64{0.1, 0.1, 0.1}, 0.1},
		{"peak_rss_vs_asynq", 1.05, []float64{1.05, 1, 1.05}, 21.0 / 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rep.Ratios[tc.name]; got != round3(tc.paired) {
				t.Errorf("paired ratio = %v, want %v", got, round3(tc.paired))
			}
			if got := rep.RatiosPerRound[tc.name]; !reflect.DeepEqual(got, tc.perRound) {
				t.Errorf("per round = %v, want %v", got, tc.perRound)
			}
			if got := rep.RatiosOfMedians[tc.name]; got != round3(tc.ofMeds) {
				t.Errorf("ratio of medians = %v, want %v", got, round3(tc.ofMeds))
			}
		})
	}
	// A round that one side lacks (a failed run) is left out, not paired with another round.
	res2 := newResults()
	res2.add("conveyor", 1, map[string]float64{"live_jobs_per_s": 500})
	res2.add("conveyor", 2, map[string]float64{"live_jobs_per_s": 100})
	res2.add("asynq_c10", 2, map[string]float64{"live_jobs_per_s": 50})
	rep2 := buildReport(o, machineFacts{}, res2)
	if got := rep2.RatiosPerRound["live_vs_asynq"]; !reflect.DeepEqual(got, []float64{2}) {
		t.Errorf("live_vs_asynq per round = %v, want [2]", got)
	}
}
