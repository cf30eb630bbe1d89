package cli

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// collector is an in-process OTLP/HTTP trace receiver: it decodes each export request and
// hands its resource spans to the test on a channel.
type collector struct {
	srv   *httptest.Server
	spans chan *tracepb.ResourceSpans
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{spans: make(chan *tracepb.ResourceSpans, 64)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// ExportTraceServiceRequest and TracesData have the same wire form (field 1, the
		// resource spans); TracesData spares the test the gRPC service's package.
		var req tracepb.TracesData
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			c.spans <- rs
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func attr(attrs []*commonpb.KeyValue, key string) string {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestOTLPExportsPublishSpan runs `conveyor publish` with OTEL_EXPORTER_OTLP_ENDPOINT set and
// waits for the publish span at an in-process collector. The spans leave at the command's
// end, when the provider is flushed, so the span must be there once Run returns.
func TestOTLPExportsPublishSpan(t *testing.T) {
	srv := redistest.Start(t)
	col := newCollector(t)
	t.Setenv(envOTLPEndpoint, col.srv.URL)
	t.Setenv(envOTLPTracesEndpoint, "")
	t.Setenv(envOTLPProtocol, "")
	t.Setenv(envOTLPTracesProtocol, "")
	t.Setenv(envOTelSDKDisabled, "")
	t.Setenv(envOTelTracesExporter, "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	var out, errOut bytes.Buffer
	code := Run(t.Context(), []string{"--redis", srv.URL(), "publish", "--queue", "traced", "--type", "echo", "--payload", "{}"},
		strings.NewReader(""), &out, &errOut, os.Getenv)
	require.Zero(t, code, errOut.String())
	id := strings.TrimSpace(out.String())
	require.NotEmpty(t, id)
	for {
		select {
		case rs := <-col.spans:
			require.Equal(t, "conveyor", attr(rs.GetResource().GetAttributes(), "service.name"))
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if attr(s.Attributes, "messaging.destination.name") == "traced" && attr(s.Attributes, "messaging.message.id") == id {
						require.Equal(t, tracepb.Span_SPAN_KIND_PRODUCER, s.Kind, s.Name)
						return
					}
				}
			}
		default:
			t.Fatalf("no publish span of job %s reached the collector by the command's end", id)
		}
	}
}

func TestOTLPWanted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"Unset", nil, false},
		{"Endpoint", map[string]string{envOTLPEndpoint: "http://c:4318"}, true},
		{"TracesEndpoint", map[string]string{envOTLPTracesEndpoint: "http://c:4318/v1/traces"}, true},
		{"SDKDisabled", map[string]string{envOTLPEndpoint: "http://c:4318", envOTelSDKDisabled: "TRUE"}, false},
		{"ExporterNone", map[string]string{envOTLPEndpoint: "http://c:4318", envOTelTracesExporter: "none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, otlpWanted(func(k string) string { return tc.env[k] }))
		})
	}
}

// TestOTLPProtocolNotCarried checks that an OTLP protocol the binary lacks (gRPC) is warned
// about and does not stop the command.
func TestOTLPProtocolNotCarried(t *testing.T) {
	t.Parallel()
	env := map[string]string{envOTLPEndpoint: "http://127.0.0.1:1", envOTLPProtocol: "grpc"}
	_, stderr, code := runWithEnv(t, env, "", "--redis", noRedis, "version")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, `ignoring $OTEL_EXPORTER_OTLP_PROTOCOL "grpc"`)
}
