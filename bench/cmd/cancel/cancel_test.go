package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestCancelShort is the short run, for `go test -short ./...` in CI: 20 cancels of running
// jobs on one server. It checks what the machine cannot help: every handler was stopped by the
// cancel's event (not by the lease renewal, 10 s away) and every attempt ended canceled (the
// command checks the queue's counters). The latencies are logged, not bounded: the targets are
// docs/BENCHMARKS.md's.
func TestCancelShort(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cancel.json")
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"-cancels", "20", "-json-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("\n%s", stdout.String())
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Cancels != 20 || rep.ByEvent != 20 || rep.ByRenewal != 0 {
		t.Fatalf("report: %+v", rep)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-cancels", "0"}, {"-visibility-timeout", "1ms"}, {"extra"}} {
		var stderr bytes.Buffer
		if code := run(t.Context(), args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
