package tracing

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP protobuf encoding of a batch of spans, written straight from the SDK's ended spans
// (sdktrace.ReadOnlySpan) with protowire: an ExportTraceServiceRequest
// (opentelemetry/proto/collector/trace/v1) of ResourceSpans, ScopeSpans and Spans, field for
// field what the SDK's own otlptrace exporter sends, without building its intermediate message
// structs nor marshalling them by reflection (that took ~5 µs and ~20 allocations a span; this
// reuses its buffers). Tests decode it with the official OTLP types and a real collector.

// encoder writes requests; its buffers are reused from one batch to the next (the queue's one
// goroutine owns it).
type encoder struct {
	req, rs, ss, span, sub, sub2 []byte
}

type group struct {
	res   *resource.Resource
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// request returns the ExportTraceServiceRequest of spans (valid until the next call).
func (e *encoder) request(spans []sdktrace.ReadOnlySpan) []byte {
	// Group by resource and scope, in order of first appearance (one group, here).
	var groups []group
	for _, s := range spans {
		res, scope := s.Resource(), s.InstrumentationScope()
		found := false
		for i := range groups {
			if groups[i].res == res && groups[i].scope == scope {
				groups[i].spans = append(groups[i].spans, s)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{res: res, scope: scope, spans: []sdktrace.ReadOnlySpan{s}})
		}
	}
	e.req = e.req[:0]
	for gi := 0; gi < len(groups); {
		// One ResourceSpans per resource (field 1 of the request), with a ScopeSpans per scope.
		res := groups[gi].res
		e.rs = e.rs[:0]
		if res != nil {
			e.sub = e.sub[:0]
			for _, kv := range res.Attributes() {
				e.sub = e.appendKeyValue(e.sub, 1, kv)
			}
			e.rs = appendMessage(e.rs, 1, e.sub) // Resource
		}
		for ; gi < len(groups) && groups[gi].res == res; gi++ {
			g := groups[gi]
			e.ss = e.ss[:0]
			e.sub = e.sub[:0]
			e.sub = appendString(e.sub, 1, g.scope.Name)
			e.sub = appendString(e.sub, 2, g.scope.Version)
			e.ss = appendMessage(e.ss, 1, e.sub) // InstrumentationScope
			for _, s := range g.spans {
				e.ss = appendMessage(e.ss, 2, e.appendSpan(e.span[:0], s))
			}
			e.ss = appendString(e.ss, 3, g.scope.SchemaURL)
			e.rs = appendMessage(e.rs, 2, e.ss)
		}
		if res != nil {
			e.rs = appendString(e.rs, 3, res.SchemaURL())
		}
		e.req = appendMessage(e.req, 1, e.rs)
	}
	return e.req
}

// appendSpan appends the fields of a Span message.
func (e *encoder) appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	e.span = b // keeps the grown buffer for the next span
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	b = appendString(b, 3, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = appendString(b, 5, s.Name())
	if k := spanKind(s.SpanKind()); k != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, k)
	}
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(max(0, s.StartTime().UnixNano())))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(max(0, s.EndTime().UnixNano())))
	for _, kv := range s.Attributes() {
		b = e.appendKeyValue(b, 9, kv)
	}
	b = appendCount(b, 10, s.DroppedAttributes())
	for _, ev := range s.Events() {
		e.sub = e.sub[:0]
		e.sub = protowire.AppendTag(e.sub, 1, protowire.Fixed64Type)
		e.sub = protowire.AppendFixed64(e.sub, uint64(max(0, ev.Time.UnixNano())))
		e.sub = appendString(e.sub, 2, ev.Name)
		for _, kv := range ev.Attributes {
			e.sub = e.appendKeyValue(e.sub, 3, kv)
		}
		e.sub = appendCount(e.sub, 4, ev.DroppedAttributeCount)
		b = appendMessage(b, 11, e.sub)
	}
	b = appendCount(b, 12, s.DroppedEvents())
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.sub = e.sub[:0]
		e.sub = protowire.AppendTag(e.sub, 1, protowire.BytesType)
		e.sub = protowire.AppendBytes(e.sub, ltid[:])
		e.sub = protowire.AppendTag(e.sub, 2, protowire.BytesType)
		e.sub = protowire.AppendBytes(e.sub, lsid[:])
		e.sub = appendString(e.sub, 3, l.SpanContext.TraceState().String())
		for _, kv := range l.Attributes {
			e.sub = e.appendKeyValue(e.sub, 4, kv)
		}
		e.sub = appendCount(e.sub, 5, l.DroppedAttributeCount)
		e.sub = protowire.AppendTag(e.sub, 6, protowire.Fixed32Type)
		e.sub = protowire.AppendFixed32(e.sub, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()))
		b = appendMessage(b, 13, e.sub)
	}
	b = appendCount(b, 14, s.DroppedLinks())
	e.sub = e.sub[:0] // the Status, written even when unset (as the SDK's exporter does)
	switch st := s.Status(); st.Code {
	case codes.Error:
		e.sub = appendString(e.sub, 2, st.Description)
		e.sub = protowire.AppendTag(e.sub, 3, protowire.VarintType)
		e.sub = protowire.AppendVarint(e.sub, 2) // STATUS_CODE_ERROR
	case codes.Ok:
		e.sub = protowire.AppendTag(e.sub, 3, protowire.VarintType)
		e.sub = protowire.AppendVarint(e.sub, 1) // STATUS_CODE_OK
	}
	b = appendMessage(b, 15, e.sub)
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, spanFlags(sc.TraceFlags(), parent.IsRemote()))
	e.span = b
	return b
}

// spanFlags are a Span's or Link's flags: the W3C trace flags, and whether the parent (the
// linked span) is remote, with the bit saying that this is known.
func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	if remote {
		f |= 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
	}
	return f
}

// spanKind is the OTLP SpanKind of k (0: unspecified).
func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}

// appendKeyValue appends kv as a KeyValue message in field num.
func (e *encoder) appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	e.sub2 = e.sub2[:0]
	e.sub2 = appendString(e.sub2, 1, string(kv.Key))
	var tmp [16]byte
	v := tmp[:0] // the AnyValue of a scalar
	switch kv.Value.Type() {
	case attribute.STRING:
		s := kv.Value.AsString()
		e.sub2 = protowire.AppendTag(e.sub2, 2, protowire.BytesType)
		e.sub2 = protowire.AppendVarint(e.sub2, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(s))))
		e.sub2 = appendStringAlways(e.sub2, 1, s)
		return appendMessage(b, num, e.sub2)
	case attribute.BOOL:
		v = protowire.AppendTag(v, 2, protowire.VarintType)
		v = protowire.AppendVarint(v, protowire.EncodeBool(kv.Value.AsBool()))
	case attribute.INT64:
		v = protowire.AppendTag(v, 3, protowire.VarintType)
		v = protowire.AppendVarint(v, uint64(kv.Value.AsInt64()))
	case attribute.FLOAT64:
		v = protowire.AppendTag(v, 4, protowire.Fixed64Type)
		v = protowire.AppendFixed64(v, math.Float64bits(kv.Value.AsFloat64()))
	default: // the slices: an ArrayValue of their elements
		var arr []byte
		switch kv.Value.Type() {
		case attribute.STRINGSLICE:
			for _, x := range kv.Value.AsStringSlice() {
				arr = appendMessage(arr, 1, appendStringAlways(nil, 1, x))
			}
		case attribute.BOOLSLICE:
			for _, x := range kv.Value.AsBoolSlice() {
				arr = appendMessage(arr, 1, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), protowire.EncodeBool(x)))
			}
		case attribute.INT64SLICE:
			for _, x := range kv.Value.AsInt64Slice() {
				arr = appendMessage(arr, 1, protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), uint64(x)))
			}
		case attribute.FLOAT64SLICE:
			for _, x := range kv.Value.AsFloat64Slice() {
				arr = appendMessage(arr, 1, protowire.AppendFixed64(protowire.AppendTag(nil, 4, protowire.Fixed64Type), math.Float64bits(x)))
			}
		default: // an invalid value: its string
			v = appendStringAlways(v, 1, kv.Value.String())
		}
		if len(v) == 0 {
			v = appendMessage(v, 5, arr)
		}
	}
	e.sub2 = appendMessage(e.sub2, 2, v)
	return appendMessage(b, num, e.sub2)
}

// appendMessage appends the embedded message msg in field num.
func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// appendString appends s in field num, unless empty (proto3's default is not written).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendStringAlways(b, num, s)
}

// appendStringAlways appends s in field num, even empty (a oneof member, AnyValue's).
func appendStringAlways(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendCount appends a uint32 count in field num, unless 0.
func appendCount(b []byte, num protowire.Number, n int) []byte {
	if n <= 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(min(n, math.MaxUint32)))
}
