package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/conveyorq/conveyor/pipeline"
)

// Bounds of the body of POST /v1/keys/rotate.
const (
	// DefaultRotateMax is how many stored values one POST /v1/keys/rotate examines unless its
	// body says ("max"): a call stays short, and the next one goes on from its cursor.
	DefaultRotateMax = 10000
	// MaxRotateMax bounds the body's "max".
	MaxRotateMax = 1000000
	// maxRotateBody bounds the body: a queue name, two numbers and a cursor.
	maxRotateBody = 8 << 10
)

// keysBody is the answer of GET /v1/keys.
type keysBody struct {
	// Keys are the keyring's key ids in its order: the first seals. Empty without Config.Keys.
	Keys []string `json:"keys"`
	// Sealing is the id of the key that seals (Keys[0]); absent without keys.
	Sealing string `json:"sealing,omitempty"`
	// CanRotate says whether this request's token may call POST /v1/keys/rotate: the server has
	// keys, and the request sent the PayloadToken when one is configured.
	CanRotate bool `json:"can_rotate"`
}

// listKeys: GET /v1/keys. The ids only: no secret ever leaves the server.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	ids := s.cfg.Keys.IDs()
	if ids == nil {
		ids = []string{}
	}
	writeJSON(w, http.StatusOK, keysBody{Keys: ids, Sealing: s.cfg.Keys.Newest(), CanRotate: s.rotateRefused(w) == nil})
	return nil
}

// rotateRefused is why the request answered through w may not rotate keys, nil when it may.
// Re-sealing opens every value, so where payloads are the PayloadToken's to see, it is too.
func (s *Server) rotateRefused(w http.ResponseWriter) error {
	if s.cfg.Keys == nil {
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonNoKeys,
			Message: "this server has no keys to re-seal with: start it with --keys FILE (Config.Keys)"}
	}
	if s.cfg.PayloadToken != "" && !sentPayloadToken(w) {
		return &apiError{Status: http.StatusForbidden, Code: CodeForbidden, Reason: ReasonPayloadTokenRequired,
			Message: "re-sealing reads the plaintext: send the payload token (serve --payload-token)"}
	}
	return nil
}

// sentPayloadToken reports whether the request answered through w sent the PayloadToken.
func sentPayloadToken(w http.ResponseWriter) bool {
	rec, ok := w.(*recorder)
	return ok && rec.payload
}

// rotateRequest is the body of POST /v1/keys/rotate; every field may be left out.
type rotateRequest struct {
	Queue  string `json:"queue"`
	Batch  int    `json:"batch"`
	Max    int    `json:"max"`
	Cursor string `json:"cursor"`
}

// rotateAnswer is the answer of POST /v1/keys/rotate: the report conveyor keys rotate --json
// prints (without the outbox: its rows are in PostgreSQL, which the server does not reach), and
// whether the pass reached the end.
type rotateAnswer struct {
	pipeline.RotateReport
	// Done is false when "max" stopped the call: call again with the answer's cursor.
	Done bool `json:"done"`
}

// rotateKeys: POST /v1/keys/rotate. One bounded pass of pipeline.Inspector.RotateKeys with the
// server's keyring: at most "max" values examined (to a batch's end), then an answer with
// done false and the cursor to go on from.
func (s *Server) rotateKeys(w http.ResponseWriter, r *http.Request) error {
	if err := s.rotateRefused(w); err != nil {
		return err
	}
	req, err := decodeRotate(w, r)
	if err != nil {
		return err
	}
	rep, err := s.inspector.RotateKeys(r.Context(), req.Queue, s.cfg.Keys,
		pipeline.RotateOptions{Batch: req.Batch, Max: req.Max, Cursor: req.Cursor})
	if errors.Is(err, pipeline.ErrQueueNotFound) {
		return queueNotFound(req.Queue)
	}
	who := "none"
	switch {
	case sentPayloadToken(w):
		who = "payload_token"
	case s.cfg.AuthToken != "":
		who = "auth_token"
	}
	ev := s.log.Info()
	if err != nil {
		ev = s.log.Warn().Err(err)
	}
	ev.Str("who", who).Str("queue", req.Queue).Str("key", rep.Key).Strs("queues", rep.Queues).
		Int("resealed", rep.Total.Resealed).Int("sealed", rep.Total.Sealed).Int("current", rep.Total.Current).
		Int("moved_on", rep.Total.MovedOn).Int("running", rep.Total.Running).Int("gone", rep.Total.Gone).
		Int("failed", rep.Total.Failed).Bool("done", err == nil && rep.Cursor == "").Msg("keys rotated")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rotateAnswer{RotateReport: rep, Done: rep.Cursor == ""})
	return nil
}

// decodeRotate reads the body of POST /v1/keys/rotate, which may be empty, and fills in the
// defaults.
func decodeRotate(w http.ResponseWriter, r *http.Request) (rotateRequest, error) {
	req := rotateRequest{Batch: pipeline.DefaultRotateBatch, Max: DefaultRotateMax}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRotateBody))
	if err != nil {
		return req, jsonError(err)
	}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := requireJSON(r); err != nil {
			return req, err
		}
		if err := decodeJSON(bytes.NewReader(b), &req); err != nil {
			return req, err
		}
	}
	switch {
	case req.Batch < 1 || req.Batch > pipeline.MaxRotateBatch:
		return req, badArg("batch %d is outside 1..%d", req.Batch, pipeline.MaxRotateBatch)
	case req.Max < 1 || req.Max > MaxRotateMax:
		return req, badArg("max %d is outside 1..%d", req.Max, MaxRotateMax)
	}
	return req, nil
}
