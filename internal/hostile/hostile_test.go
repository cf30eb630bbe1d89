package hostile

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `q"uote\back`, "a\x00\n\x1fb", "caf\u00e9"} {
		var got string
		if err := json.Unmarshal([]byte(JSONString(s)), &got); err != nil || got != s {
			t.Fatalf("%q: %q, %v", s, got, err)
		}
	}
	if JSONString("a\xffb") != "\"a\xffb\"" {
		t.Fatal("invalid UTF-8 was not copied byte for byte")
	}
}

// TestCases checks the table's shape: unique names, something to look for, and bodies that are
// JSON wherever the case does not hold invalid UTF-8 on purpose.
func TestCases(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range Cases("q") {
		if seen[c.Name] || len(c.Want) == 0 {
			t.Fatalf("%s: a duplicate name or no Want", c.Name)
		}
		seen[c.Name] = true
		body := c.Job.HTTPBody()
		if !json.Valid([]byte(body)) && !strings.Contains(c.Name, "UTF8") {
			t.Errorf("%s: body is not JSON: %s", c.Name, body)
		}
		if args := c.Job.CLIArgs(); args[0] != "publish" {
			t.Errorf("%s: %q", c.Name, args)
		}
	}
	for _, e := range Extremes("q") {
		if !json.Valid([]byte(e.Job.HTTPBody())) {
			t.Errorf("%s: body is not JSON", e.Name)
		}
	}
}
