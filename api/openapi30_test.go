package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// updateOpenAPI30 writes openapi-3.0.json anew from openapi.json:
//
//	go test ./api -run TestOpenAPI30 -update-openapi30
var updateOpenAPI30 = flag.Bool("update-openapi30", false, "write openapi-3.0.json from openapi.json")

// openAPI31Only are the keywords of OpenAPI 3.1 (JSON Schema 2020-12) that have no OpenAPI 3.0
// form and that to30 does not rewrite: the document must not use them (or to30 must learn them).
var openAPI31Only = []string{"$schema", "$id", "$anchor", "$defs", "$dynamicRef", "prefixItems",
	"if", "then", "else", "dependentSchemas", "dependentRequired", "unevaluatedProperties",
	"unevaluatedItems", "contentMediaType", "contentEncoding", "examples", "webhooks",
	"jsonSchemaDialect", "patternProperties", "propertyNames", "contains"}

// to30 rewrites an OpenAPI 3.1 document as 3.0.3, for the tools that read only 3.0 (kin-openapi's
// validator, older code generators): a type list with "null" becomes the type and nullable; a
// schema that takes any value (no type, no $ref, no composition), which takes null in 3.1, gets
// nullable (payload and result: null when empty); const becomes a one-value enum; a numeric exclusiveMinimum/Maximum becomes the
// bound with the 3.0 boolean. It returns an error for a 3.1 keyword it cannot rewrite.
func to30(doc map[string]any) error {
	doc["openapi"] = "3.0.3"
	if info, ok := doc["info"].(map[string]any); ok {
		delete(info, "summary") // 3.1 only
		if lic, ok := info["license"].(map[string]any); ok {
			delete(lic, "identifier")
		}
	}
	var errs []string
	var walk func(v any, path string, schema bool)
	walk = func(v any, path string, schema bool) {
		switch v := v.(type) {
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s/%d", path, i), schema)
			}
		case map[string]any:
			if schema {
				if err := schema30(v); err != nil {
					errs = append(errs, path+": "+err.Error())
				}
			}
			for k, x := range v {
				if slices.Contains(openAPI31Only, k) && !(k == "examples" && !schema) {
					errs = append(errs, path+": "+k+" has no OpenAPI 3.0 form")
				}
				walk(x, path+"/"+k, childIsSchema(k, schema, path))
			}
		}
	}
	walk(doc, "", false)
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// childIsSchema reports whether the value under key k of a node is a schema (or a list or map
// of them): parent says whether the node itself is one, path where it is.
func childIsSchema(k string, parent bool, path string) bool {
	switch k {
	case "schema", "items", "not", "additionalProperties":
		return true
	case "oneOf", "anyOf", "allOf":
		return parent || strings.HasSuffix(path, "/schema")
	}
	if parent {
		return false
	}
	// The maps of schemas: components.schemas.NAME and a schema's properties.NAME.
	return path == "/components/schemas" || strings.HasSuffix(path, "/properties")
}

// schema30 rewrites one schema object in place.
func schema30(s map[string]any) error {
	if types, ok := s["type"].([]any); ok {
		var kept []any
		for _, t := range types {
			if t == "null" {
				s["nullable"] = true
				continue
			}
			kept = append(kept, t)
		}
		if len(kept) != 1 {
			return fmt.Errorf("type %v: OpenAPI 3.0 takes one type (and nullable)", types)
		}
		s["type"] = kept[0]
	}
	if c, ok := s["const"]; ok {
		delete(s, "const")
		s["enum"] = []any{c}
	}
	for _, b := range []struct{ excl, bound string }{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		if n, ok := s[b.excl].(float64); ok {
			s[b.bound], s[b.excl] = n, true
		}
	}
	_, typed := s["type"]
	_, ref := s["$ref"]
	composed := s["oneOf"] != nil || s["anyOf"] != nil || s["allOf"] != nil || s["enum"] != nil
	// An object's or an array's keywords say what the author meant: not any value.
	shaped := s["properties"] != nil || s["items"] != nil || s["additionalProperties"] != nil
	if !typed && !ref && !composed && !shaped {
		s["nullable"] = true // any value, null among them, as in 3.1
	}
	return nil
}

// openAPI30 returns the 3.0 copy of openapi.json, as openapi-3.0.json holds it.
func openAPI30(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NoError(t, to30(doc))
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(doc))
	return b.Bytes()
}

// TestOpenAPI30 fails when openapi-3.0.json is not what openapi.json makes: edit openapi.json
// and run with -update-openapi30. The server serves the copy at /v1/openapi-3.0.json.
func TestOpenAPI30(t *testing.T) {
	t.Parallel()
	want := openAPI30(t)
	if *updateOpenAPI30 {
		// The server serves the copy embedded when the test was built: the next run checks it.
		require.NoError(t, os.WriteFile("openapi-3.0.json", want, 0o644))
		return
	}
	got, err := os.ReadFile("openapi-3.0.json")
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got),
		"openapi-3.0.json is stale: run go test ./api -run TestOpenAPI30 -update-openapi30")

	e := setup(t)
	r := e.do("GET", "/v1/openapi-3.0.json", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, want, r.body)
}

func TestTo30(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want, err string }{
		{"NullableType", `{"components":{"schemas":{"S":{"type":["string","null"]}}}}`,
			`{"openapi":"3.0.3","components":{"schemas":{"S":{"type":"string","nullable":true}}}}`, ""},
		{"AnyValueIsNullable", `{"components":{"schemas":{"J":{"properties":{"payload":{"description":"any"},"n":{"type":"integer"}}}}}}`,
			`{"openapi":"3.0.3","components":{"schemas":{"J":{"properties":{"payload":{"description":"any","nullable":true},"n":{"type":"integer"}}}}}}`, ""},
		{"RefUntouched", `{"paths":{"/a":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/x"}}}}}}}}}`,
			`{"openapi":"3.0.3","paths":{"/a":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/x"}}}}}}}}}`, ""},
		{"OneOfBranches", `{"paths":{"/a":{"get":{"parameters":[{"name":"p","schema":{"oneOf":[{"type":["integer","null"]},{"const":"x"}]}}]}}}}`,
			`{"openapi":"3.0.3","paths":{"/a":{"get":{"parameters":[{"name":"p","schema":{"oneOf":[{"type":"integer","nullable":true},{"enum":["x"],"nullable":false}]}}]}}}}`, ""},
		{"Exclusive", `{"components":{"schemas":{"N":{"type":"number","exclusiveMinimum":0}}}}`,
			`{"openapi":"3.0.3","components":{"schemas":{"N":{"type":"number","minimum":0,"exclusiveMinimum":true}}}}`, ""},
		{"TwoTypes", `{"components":{"schemas":{"S":{"type":["string","integer"]}}}}`, "", "/components/schemas/S: type [string integer]"},
		{"PrefixItems", `{"components":{"schemas":{"S":{"type":"array","prefixItems":[]}}}}`, "", "prefixItems has no OpenAPI 3.0 form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc map[string]any
			require.NoError(t, json.Unmarshal([]byte(tc.in), &doc))
			err := to30(doc)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			got, err := json.Marshal(doc)
			require.NoError(t, err)
			// A const's enum is not an "any value" schema: compare without the nullable false
			// the want spells for clarity.
			require.JSONEq(t, strings.ReplaceAll(tc.want, `,"nullable":false`, ""), string(got))
		})
	}
}
