package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// canonicalJSON renders the canonical form documented in docs/reference/c-abi/README.md: defaults explicit, keys
// sorted, compact, HTML characters not escaped.
func canonicalJSON(s *Spec) []byte {
	inputs := make(map[string]any, len(s.Inputs))
	for _, in := range s.Inputs {
		m := map[string]any{"type": in.Type, "required": in.Required}
		if in.HasDefault {
			m["default"] = in.Default
		}
		if in.Format != "" {
			m["format"] = in.Format
		}
		if in.Description != "" {
			m["description"] = in.Description
		}
		if in.Enum != nil {
			m["enum"] = in.Enum
		}
		inputs[in.Name] = m
	}
	doc := map[string]any{
		"name":        s.Name,
		"description": s.Description,
		"inputs":      inputs,
		"steps":       canonicalSteps(s.Steps),
	}
	// Absent when not set, so specs without them keep their hash.
	if !s.Defaults.IsEmpty() {
		d := map[string]any{}
		if s.Defaults.TimeoutSecs != 0 {
			d["timeout_secs"] = s.Defaults.TimeoutSecs
		}
		if s.Defaults.Retry != nil {
			d["retry"] = canonicalRetry(s.Defaults.Retry)
		}
		doc["defaults"] = d
	}
	if len(s.OnFailure) > 0 {
		doc["on_failure"] = canonicalSteps(s.OnFailure)
	}
	if s.Priority != 0 {
		doc["priority"] = s.Priority
	}
	if s.FairShare != "" {
		doc["fair_share"] = s.FairShare
	}
	return marshalCanonical(doc)
}

// CanonicalValue returns v as compact JSON with sorted keys and no HTML escaping; the same
// encoding the canonical spec uses. It is used for idempotency `auto` keys and stored outputs.
func CanonicalValue(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func marshalCanonical(v any) []byte {
	b, err := CanonicalValue(v)
	if err != nil {
		// Every value in a Spec comes from the decoder, which only produces JSON types.
		panic("spec: canonical form: " + err.Error())
	}
	return b
}

func canonicalSteps(steps []*Step) []any {
	out := make([]any, 0, len(steps))
	for _, st := range steps {
		out = append(out, canonicalStep(st))
	}
	return out
}

func canonicalStep(st *Step) map[string]any {
	m := map[string]any{"id": st.ID, "kind": string(st.Kind)}
	if st.Description != "" {
		m["description"] = st.Description
	}
	if st.HasDependsOn {
		m["depends_on"] = append([]string{}, st.DependsOn...)
	}
	switch st.Kind {
	case KindTool:
		m["tool"], m["args"] = st.Tool, st.Args
		if st.Pool != "" { // absent when not set, so specs without it keep their hash
			m["pool"] = st.Pool
		}
	case KindToolRemote:
		m["dcc"], m["tool"], m["args"] = st.DCC, st.Tool, st.Args
	case KindForeach:
		m["items"], m["as"], m["concurrency"] = st.Items, st.As, st.Concurrency
		m["on_any_fail"], m["steps"] = string(st.OnAnyFail), canonicalSteps(st.Steps)
	case KindParallel:
		m["on_any_fail"], m["steps"] = string(st.OnAnyFail), canonicalSteps(st.Steps)
	case KindBranch:
		m["on"], m["then"], m["else"] = st.On, canonicalSteps(st.Then), canonicalSteps(st.Else)
	case KindApprove:
		m["prompt"] = st.Prompt
	case KindWorkflow:
		m["workflow"], m["inputs"] = st.Workflow, st.Inputs
	}
	p := st.Policy
	if p.TimeoutSecs != 0 {
		m["timeout_secs"] = p.TimeoutSecs
	}
	if r := p.Retry; r != nil {
		m["retry"] = canonicalRetry(r)
	}
	if p.IdempotencyKey != "" {
		m["idempotency_key"] = p.IdempotencyKey
		m["idempotency_scope"] = string(p.IdempotencyScope)
	}
	if p.IdempotencyTTLSecs != 0 {
		m["idempotency_ttl_secs"] = p.IdempotencyTTLSecs
	}
	// Set only when given, so that specs without them keep their hash.
	if c := p.Cache; c != nil {
		m["cache"] = map[string]any{"version": c.Version, "ttl_secs": c.TTLSecs, "key": c.Key}
	}
	if st.Reads != nil {
		m["reads"] = append([]string{}, st.Reads...)
	}
	if st.Writes != nil {
		m["writes"] = append([]string{}, st.Writes...)
	}
	if len(st.Resources) > 0 {
		m["resources"] = st.Resources
	}
	return m
}

// canonicalRetry is the canonical object of a retry policy; "multiplier" only when set, so specs
// without it keep their hash.
func canonicalRetry(r *RetryPolicy) map[string]any {
	var retryOn any
	if r.RetryOn != nil {
		retryOn = append([]string{}, r.RetryOn...)
	}
	m := map[string]any{
		"max_attempts": r.MaxAttempts, "backoff": string(r.Backoff),
		"initial_delay_ms": r.InitialDelayMs, "max_delay_ms": r.MaxDelayMs,
		"jitter": r.Jitter, "retry_on": retryOn,
	}
	if r.Multiplier != 0 {
		m["multiplier"] = r.Multiplier
	}
	return m
}

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
