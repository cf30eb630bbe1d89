package pipeline

import (
	"github.com/ThreeDotsLabs/watermill"
	"github.com/rs/zerolog"
)

// WatermillLogger adapts a zerolog.Logger to Watermill's LoggerAdapter. Watermill's Info is
// chatty (every subscription start and stop) and lands at Debug; its Debug and Trace at Trace.
func WatermillLogger(l zerolog.Logger) watermill.LoggerAdapter {
	return wmLogger{l: l}
}

type wmLogger struct {
	l zerolog.Logger
}

func (a wmLogger) Error(msg string, err error, f watermill.LogFields) {
	a.l.Error().Err(err).Fields(map[string]any(f)).Msg(msg)
}

func (a wmLogger) Info(msg string, f watermill.LogFields) {
	a.l.Debug().Fields(map[string]any(f)).Msg(msg)
}

func (a wmLogger) Debug(msg string, f watermill.LogFields) {
	a.l.Trace().Fields(map[string]any(f)).Msg(msg)
}

func (a wmLogger) Trace(msg string, f watermill.LogFields) {
	a.l.Trace().Fields(map[string]any(f)).Msg(msg)
}

func (a wmLogger) With(f watermill.LogFields) watermill.LoggerAdapter {
	return wmLogger{l: a.l.With().Fields(map[string]any(f)).Logger()}
}
