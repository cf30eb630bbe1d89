package pipeline

import (
	"unicode"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/rs/zerolog"
)

// watermillLogger adapts a zerolog.Logger to Watermill's LoggerAdapter, for Watermill's own
// messages (its router's). They are about its plumbing, every subscription start and stop,
// so they stay at debug and below: Watermill's Info lands at Debug, its Debug and Trace at
// Trace; its errors stay errors. Messages are written in Conveyor's style, starting lowercase
// ("adding handler"); Watermill's field names are snake_case already.
func watermillLogger(l zerolog.Logger) watermill.LoggerAdapter {
	return wmLogger{l: l, quiet: true}
}

// subscriberLogger adapts l for package stream's Subscriber. Its messages are Conveyor's own,
// few and meaningful (a lease lost, orphans adopted, Redis back after an outage), so their
// levels are kept.
func subscriberLogger(l zerolog.Logger) watermill.LoggerAdapter {
	return wmLogger{l: l}
}

type wmLogger struct {
	l     zerolog.Logger
	quiet bool // Watermill's own messages: one level down
}

func (a wmLogger) Error(msg string, err error, f watermill.LogFields) {
	a.l.Error().Err(err).Fields(map[string]any(f)).Msg(lowerFirst(msg))
}

func (a wmLogger) Info(msg string, f watermill.LogFields) {
	a.event(zerolog.InfoLevel, zerolog.DebugLevel).Fields(map[string]any(f)).Msg(lowerFirst(msg))
}

func (a wmLogger) Debug(msg string, f watermill.LogFields) {
	a.event(zerolog.DebugLevel, zerolog.TraceLevel).Fields(map[string]any(f)).Msg(lowerFirst(msg))
}

func (a wmLogger) Trace(msg string, f watermill.LogFields) {
	a.l.Trace().Fields(map[string]any(f)).Msg(lowerFirst(msg))
}

func (a wmLogger) With(f watermill.LogFields) watermill.LoggerAdapter {
	return wmLogger{l: a.l.With().Fields(map[string]any(f)).Logger(), quiet: a.quiet}
}

// event starts an event at level, or at quiet for Watermill's own messages.
func (a wmLogger) event(level, quiet zerolog.Level) *zerolog.Event {
	if a.quiet {
		level = quiet
	}
	return a.l.WithLevel(level)
}

// lowerFirst lowercases the first letter of msg unless the second is upper case too (an
// acronym: "XACK failed").
func lowerFirst(msg string) string {
	r, n := utf8.DecodeRuneInString(msg)
	if !unicode.IsUpper(r) {
		return msg
	}
	if r2, _ := utf8.DecodeRuneInString(msg[n:]); unicode.IsUpper(r2) {
		return msg
	}
	return string(unicode.ToLower(r)) + msg[n:]
}
