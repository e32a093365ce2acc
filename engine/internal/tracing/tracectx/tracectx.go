// Package tracectx carries the W3C traceparent of a tool call's span in a context, from the
// executor to whoever sends the call to a worker (engine/internal/remote adds it to the
// tools/call request's _meta). It imports nothing of OpenTelemetry, so the packages that read
// it stay free of it.
package tracectx

import "context"

type key struct{}

// With returns ctx carrying traceparent; ctx itself when traceparent is "" (tracing off: no
// allocation).
func With(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return context.WithValue(ctx, key{}, traceparent)
}

// From returns the traceparent ctx carries, "" when none.
func From(ctx context.Context) string {
	s, _ := ctx.Value(key{}).(string)
	return s
}

// Valid reports whether s has the form of a W3C traceparent of version 00:
// "00-" + 32 lowercase hex digits (the trace id, not all zeros) + "-" + 16 (the span id, not
// all zeros) + "-" + 2 (the flags). For a traceparent read from outside the process (a queued
// call's, written by another engine) before it goes to a tool: anything else is dropped.
func Valid(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	return hexDigits(s[3:35], false) && hexDigits(s[36:52], false) && hexDigits(s[53:], true)
}

// hexDigits reports whether s is lowercase hex digits, and not all zeros unless zeroOK.
func hexDigits(s string, zeroOK bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '0':
		case '1' <= c && c <= '9', 'a' <= c && c <= 'f':
			zeroOK = true
		default:
			return false
		}
	}
	return zeroOK
}
