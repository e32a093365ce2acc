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
