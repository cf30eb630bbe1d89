package handlers

import (
	"encoding/json"
	"slices"
)

// Info describes one ready handler for people and tools: `conveyor handlers` prints the
// Catalog as a table (and with --json as a JSON array of Info), and shell completion offers
// the types with their summaries.
type Info struct {
	// Type is the job type the handler is registered under by All and Register.
	Type string `json:"type"`
	// Summary says in a few words what it does.
	Summary string `json:"summary"`
	// Payload is the shape of the payload it accepts, in a JSON-like notation: UPPERCASE
	// words stand for values, a field followed by ? is optional. The package documentation
	// gives each field's meaning.
	Payload string `json:"payload"`
	// Example is a payload it accepts: valid JSON, ready for `conveyor publish --payload`.
	Example json.RawMessage `json:"example"`
	// Result is the shape of the result of a successful job.
	Result string `json:"result"`
}

// catalog is the table behind Catalog, in the order of the type names. The package
// documentation says the same at length; TestCatalog runs every example through its handler.
var catalog = []Info{
	{
		Type:    TypeEcho,
		Summary: "returns its payload as the result",
		Payload: "any JSON",
		Example: json.RawMessage(`{"hello":"world"}`),
		Result:  "the payload",
	},
	{
		Type:    TypeFail,
		Summary: "always fails, with a retryable error",
		Payload: `{"message"?: STRING}, or anything`,
		Example: json.RawMessage(`{"message":"boom"}`),
		Result:  "none; the error is the message",
	},
	{
		Type:    TypeFlaky,
		Summary: "fails its first K attempts, then succeeds",
		Payload: `{"fail_times": K}, K >= 0`,
		Example: json.RawMessage(`{"fail_times":2}`),
		Result:  `{"attempt": N}`,
	},
	{
		Type:    TypeHTTP,
		Summary: "makes one HTTP request, to a public address",
		Payload: `{"url": URL, "method"?, "body"?, "headers"?}`,
		Example: json.RawMessage(`{"url":"https://example.com/hook","body":{"event":"signup"}}`),
		Result:  `{"status": CODE, "body": STRING}`,
	},
	{
		Type:    TypeNoop,
		Summary: "does nothing (for benchmarks)",
		Payload: "anything (ignored)",
		Example: json.RawMessage(`{}`),
		Result:  "none",
	},
	{
		Type:    TypeSleep,
		Summary: "sleeps for ms milliseconds",
		Payload: `{"ms": N}, N from 0 to 86400000`,
		Example: json.RawMessage(`{"ms":1500}`),
		Result:  `{"slept_ms": N}`,
	},
}

// Catalog describes the handlers of All, one Info per job type, sorted by type. The slice and
// its examples are new on every call; the caller may change them.
func Catalog() []Info {
	out := slices.Clone(catalog)
	for i := range out {
		out[i].Example = slices.Clone(out[i].Example)
	}
	return out
}
