package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"strconv"

	"go.opentelemetry.io/otel/trace"
)

// The ids of a run's trace are derived from run ids, so that nothing needs storing: every
// execution of a run (a resume, a takeover by another engine) computes the same ones.
//
//	trace id            TraceID(root run)            the first 16 bytes of SHA-256("dcc-flow trace\x00" + id)
//	first run span      RunSpanID(run)               8 bytes of SHA-256("dcc-flow run\x00" + id)
//	attempt span        AttemptSpanID(run, key, n)   a 64-bit hash of the run id, the step key and n
//
// Run ids end in random digits, so these are as unguessable and as evenly spread as random ids.
// The spans of a resumed execution and of tool calls get random ids.

// TraceID returns the trace id of the run tree whose outermost run is rootRunID.
func TraceID(rootRunID string) trace.TraceID {
	sum := sha256.Sum256([]byte("dcc-flow trace\x00" + rootRunID))
	var id trace.TraceID
	copy(id[:], sum[:16])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

// RunSpanID returns the span id of the first execution of run runID.
func RunSpanID(runID string) trace.SpanID {
	return spanID("dcc-flow run\x00" + runID)
}

// AttemptSpanID returns the span id of attempt n of step instance stepKey of run runID: FNV-1a
// over the three, mixed (SplitMix64's finaliser) so that neighbouring keys give unrelated ids.
// Not SHA-256 as the others: it is computed for every attempt, and allocates nothing.
func AttemptSpanID(runID, stepKey string, n int) trace.SpanID {
	h := uint64(14695981039346656037)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 1099511628211
		}
		h = (h ^ 0xff) * 1099511628211 // a separator no UTF-8 text contains
	}
	add("dcc-flow attempt")
	add(runID)
	add(stepKey)
	for v := uint64(n); ; v >>= 8 {
		h = (h ^ (v & 0xff)) * 1099511628211
		if v < 0x100 {
			break
		}
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], h)
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

func spanID(s string) trace.SpanID {
	sum := sha256.Sum256([]byte(s))
	var id trace.SpanID
	copy(id[:], sum[:8])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// Traceparent returns the W3C traceparent header of sc: "00-TRACEID-SPANID-01" (sampled).
func Traceparent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	copy(b[52:], "-00")
	if sc.IsSampled() {
		b[54] = '1'
	}
	return string(b[:])
}

// ParseTraceparent reads a W3C traceparent header of version 00 (ok false for anything else).
func ParseTraceparent(s string) (trace.SpanContext, bool) {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}, false
	}
	flags, err := strconv.ParseUint(s[53:], 16, 8)
	if err != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags), Remote: true}), true
}

// remoteParent is the span context of a parent span made elsewhere (another execution).
func remoteParent(tid trace.TraceID, sid trace.SpanID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// idsKey is the context key of the ids the next span started with that context takes.
type idsKey struct{}

type forcedIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// withIDs returns ctx such that the span started with it gets these ids (idGenerator). The
// trace id is used only for a root span: a child keeps its parent's.
func withIDs(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, idsKey{}, forcedIDs{trace: tid, span: sid})
}

// idGenerator gives a span the ids withIDs put in its context, else random ones. The context
// Start returns still holds them: its children are started from a fresh context holding only
// the span (trace.ContextWithSpan), so they do not inherit them.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(idsKey{}).(forcedIDs); ok {
		return f.trace, f.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if f, ok := ctx.Value(idsKey{}).(forcedIDs); ok {
		return f.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

func osGetenv(k string) string { return os.Getenv(k) }
