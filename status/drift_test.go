package status_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/status"
)

// listAllowed are the files that may spell a list of statuses themselves, and why.
var listAllowed = map[string]string{
	"status/status.go":              "the list",
	"api/openapi.json":              "written by go generate ./api (TestOpenAPIStatuses)",
	"api/openapi-3.0.json":          "made from openapi.json (TestOpenAPI30)",
	"internal/inspect/list.go":      "Inspector.List reads each listable status from its own index",
	"internal/jobtest/jobtest.go":   "Seed brings a job to each status through the scripts that set it",
	"api/dashboard/app.js":          "a list page's extra columns, for the statuses that have some",
	"bench/cmd/compare/conveyor.go": "the comparison's columns, fixed so that old runs still compare",
	"pipeline/rotate.go":            "RotateKeys reports by the place it walks, each read from its own index, as Inspector.List",
}

// listSkipped are the trees not searched: the store, whose scripts write the statuses (its own
// drift tests check them), and test data.
var listSkipped = []string{"internal/jobstate", ".git", "testdata", "test-artifacts", "node_modules"}

// A status spelled where code lists statuses: a quoted name (not a struct tag's), or a Go
// constant (status.Queued; StatusQueued, as the constants were named in pipeline before).
var statusSpelled = regexp.MustCompile("(?:^|[^:])[\"'`]([a-z_]+)[\"'`]|\\b(?:status\\.|Status)([A-Z][A-Za-z]+)\\b")

// No file but those of listAllowed lists the statuses itself: three of them within three
// lines, two of them not final (lists of counters name completed, failed and canceled too).
// So a new status in package status's list reaches the OpenAPI enums, the dashboard, the CLI,
// the events and the metrics with no edit of theirs; docs/ARCHITECTURE.md names the rest.
func TestNoStatusListOutsideTheList(t *testing.T) {
	t.Parallel()
	names := map[string]status.Status{}
	for _, s := range status.All() {
		names[string(s)] = s
		constant := ""
		for _, w := range strings.Split(string(s), "_") {
			constant += strings.ToUpper(w[:1]) + w[1:]
		}
		names[constant] = s
	}
	root := ".."
	searched := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			if slices.Contains(listSkipped, rel) || slices.Contains(listSkipped, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, "_test.go") || !regexp.MustCompile(`\.(go|js|css|html|json|ya?ml)$`).MatchString(rel) {
			return nil
		}
		searched++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Split(string(src), "\n")
		for i := range lines {
			found := map[status.Status]bool{}
			live := 0
			for _, line := range lines[i:min(i+3, len(lines))] {
				for _, m := range statusSpelled.FindAllStringSubmatch(line, -1) {
					if s, ok := names[m[1]+m[2]]; ok && !found[s] {
						found[s] = true
						if !s.Final() {
							live++
						}
					}
				}
			}
			if len(found) >= 3 && live >= 2 {
				if _, ok := listAllowed[rel]; !ok {
					t.Errorf("%s:%d lists statuses itself: read them from package status (status.All, status.Listable)", rel, i+1)
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if searched < 150 {
		t.Fatalf("searched %d files; the walk lost some", searched)
	}
}
