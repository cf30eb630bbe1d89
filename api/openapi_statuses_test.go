package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/conveyorq/conveyor/status"
)

// updateOpenAPIStatuses writes openapi.json's status enums anew from package status (go
// generate ./api runs it, then the 3.0 copy's update).
var updateOpenAPIStatuses = flag.Bool("update-openapi-statuses", false, "write openapi.json's status enums from package status")

// statusEnum is one enum of openapi.json that lists statuses, by its path in the document.
type statusEnum struct {
	path []string
	// values are the enum's values for a list of statuses.
	values func(list []status.Info) []string
}

var statusEnums = []statusEnum{
	// list --status and GET .../jobs?status=: the listable statuses, each followed by its word.
	{[]string{"paths", "/v1/queues/{queue}/jobs", "get", "parameters", "0", "schema", "enum"}, listValues},
	{[]string{"paths", "/v1/jobs", "get", "parameters", "0", "schema", "enum"}, listValues},
	{[]string{"components", "schemas", "Job", "properties", "status", "enum"}, allValues},
	// A task purged from the dead set has no job, and that status.
	{[]string{"components", "schemas", "WorkflowTask", "properties", "status", "enum"},
		func(list []status.Info) []string { return append(allValues(list), "purged") }},
}

func allValues(list []status.Info) []string {
	out := make([]string, len(list))
	for i, in := range list {
		out[i] = string(in.Status)
	}
	return out
}

// listValues are the listable statuses in status.Listable's order (gauged first), each followed
// by the word that stands for it where it has one.
func listValues(list []status.Info) []string {
	var out []string
	for _, gauge := range []bool{true, false} {
		for _, in := range list {
			if in.Listable && in.Gauge == gauge {
				out = append(out, string(in.Status))
				if in.Word != "" {
					out = append(out, in.Word)
				}
			}
		}
	}
	return out
}

// withStatuses returns doc with its status enums made from list; the rest of the text is kept
// as it is, byte for byte.
func withStatuses(doc []byte, list []status.Info) ([]byte, error) {
	for _, e := range statusEnums {
		start, end, err := valueSpan(doc, e.path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(e.path, " "), err)
		}
		doc = slices.Concat(doc[:start:start], enumText(e.values(list), indentAt(doc, start)), doc[end:])
	}
	return doc, nil
}

// valueSpan returns where the value at path starts and ends in doc.
func valueSpan(doc []byte, path []string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	for _, key := range path {
		tok, err := dec.Token()
		if err != nil {
			return 0, 0, err
		}
		found := false
		switch tok {
		case json.Delim('{'):
			for !found && dec.More() {
				k, err := dec.Token()
				if err != nil {
					return 0, 0, err
				}
				if found = k == key; !found {
					if err := dec.Decode(new(json.RawMessage)); err != nil {
						return 0, 0, err
					}
				}
			}
		case json.Delim('['):
			want, _ := strconv.Atoi(key)
			for i := 0; !found && dec.More(); i++ {
				if found = i == want; !found {
					if err := dec.Decode(new(json.RawMessage)); err != nil {
						return 0, 0, err
					}
				}
			}
		}
		if !found {
			return 0, 0, fmt.Errorf("no %q", key)
		}
	}
	// The decoder stands after the key (or the element before): the value starts after the
	// separators.
	start = int(dec.InputOffset())
	for start < len(doc) && strings.IndexByte(" \t\r\n:,", doc[start]) >= 0 {
		start++
	}
	if err := dec.Decode(new(json.RawMessage)); err != nil {
		return 0, 0, err
	}
	return start, int(dec.InputOffset()), nil
}

// indentAt is the indentation of the line that holds offset i.
func indentAt(doc []byte, i int) string {
	line := doc[bytes.LastIndexByte(doc[:i], '\n')+1 : i]
	return string(line[:len(line)-len(bytes.TrimLeft(line, " "))])
}

// enumText writes values as openapi.json writes an array: one a line, indented two spaces more.
func enumText(values []string, indent string) []byte {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, v := range values {
		q, _ := json.Marshal(v)
		b.WriteString(indent + "  " + string(q))
		if i < len(values)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(indent + "]")
	return b.Bytes()
}

// TestOpenAPIStatuses fails when openapi.json's status enums are not package status's list:
// run go generate ./api (it rewrites them, then openapi-3.0.json).
func TestOpenAPIStatuses(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := withStatuses(doc, status.Infos())
	if err != nil {
		t.Fatal(err)
	}
	if *updateOpenAPIStatuses {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		doc = want
	}
	if !bytes.Equal(doc, want) {
		t.Fatal("openapi.json's status enums are stale: run go generate ./api")
	}
	// Each gauged status has its QueueStats property, by its word.
	var spec struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		t.Fatal(err)
	}
	for _, in := range status.Infos() {
		if _, ok := spec.Components.Schemas["QueueStats"].Properties[in.Status.Word()]; in.Gauge && !ok {
			t.Errorf("openapi.json's QueueStats has no property %q, the gauge of %s", in.Status.Word(), in.Status)
		}
	}
}

// A status added to the list shows in every derived place of the API: each OpenAPI enum, the
// dashboard's script and its colours.
func TestNewStatusReachesTheAPI(t *testing.T) {
	t.Parallel()
	const fake = "held_for_test"
	list := append(status.Infos(), status.Info{Status: fake, Listable: true, Tone: status.ToneWarn, Help: "held"})
	doc, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := withStatuses(doc, list)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range statusEnums {
		start, end, err := valueSpan(got, e.path)
		if err != nil {
			t.Fatal(err)
		}
		var values []string
		if err := json.Unmarshal(got[start:end], &values); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(values, fake) {
			t.Errorf("%s: %v lacks the new status", strings.Join(e.path, " "), values)
		}
	}
	js := string(statusesJS(list, append(status.Listable(), fake)))
	if strings.Count(js, `"`+fake+`"`) != 3 { // its name, its word and its place in the tabs
		t.Errorf("statuses.js lacks the new status: %s", js)
	}
	if css := string(statusesCSS(list)); !strings.Contains(css, ".st-"+fake+" { color: var(--warn); }") {
		t.Errorf("statuses.css lacks the new status: %s", css)
	}
}
