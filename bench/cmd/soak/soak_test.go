package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSoakShort is the 1,000,000-job soak at 20,000 jobs with a retention of 30 seconds: every
// sample must follow docs/OPERATIONS.md's arithmetic within the default 10%, and the records
// must be gone after the retention. It starts its own redis-server and takes about 36 s, so it
// runs with -short too (scripts/test.sh runs the bench module that way).
func TestSoakShort(t *testing.T) {
	out := filepath.Join(t.TempDir(), "soak.json")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-jobs", "20000", "-retention", "30s", "-min-retention", "1s", "-expire", "-json-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, s := range rep.Samples {
		points = append(points, s.Point)
	}
	if got := strings.Join(points, ","); got != "published,mid-run,completed,expired" {
		t.Fatalf("samples %s", got)
	}
	pub, done, gone := rep.Samples[0], rep.Samples[2], rep.Samples[3]
	if pub.Unfinish != 20000 || pub.StreamLen != 20000 || pub.JobHashes == 0 || pub.Stream == 0 {
		t.Errorf("after publish: %+v", pub)
	}
	// The retention is 30 s, 20 times the run's 1.5 s here: with 2 s, records expired before
	// the completed sample under load, and the fixed 1.5 MB of Redis's tables showed up as
	// error against the fewer records left (+11.5% to +21.8%). Every key but the stream, the stats hash, the set of queues, and the index of completed
	// jobs with its count, is a retained record.
	if done.Completed != 20000 || done.Expires == 0 || done.Keys != done.Expires+5 || done.StreamLen != 0 {
		t.Errorf("after completion: %+v", done)
	}
	if gone.Expires != 0 || gone.JobHashes != 0 || gone.Keys > 5 {
		t.Errorf("after expiry: %+v", gone)
	}
	if !strings.Contains(stdout.String(), "| completed |") {
		t.Errorf("no table on stdout:\n%s", stdout.String())
	}
}

// TestSoakOffTheArithmetic checks that the comparison can fail: with half the doc's bytes per
// queued job expected, the published sample is off by far more than 10% and the command exits
// 1 naming it.
func TestSoakOffTheArithmetic(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-jobs", "2000", "-queued-bytes", "200"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "off the arithmetic: published:") {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr.String())
	}
}

func TestSoakFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-jobs", "10"},
		{"-retention", "0s"},
		{"-expire"}, // with the default 24h retention it would wait a day
		{"-payload-bytes", "0"},
		{"-tolerance", "0"},
		{"stray"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
