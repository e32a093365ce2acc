package spec_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// reads, writes and cache (docs/guide/assets.md) decode into the step and its policy, and enter
// the canonical spec (its hash) only when given.
func TestAssetFieldsDecodeAndCanonical(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
name: shot
inputs: {shot: {type: string}}
steps:
  - id: layout
    tool: usd__assemble
    reads: ["assets/{{inputs.shot}}/*.usda", "shots/{{inputs.shot}}/layout.usda"]
    writes: "out/{{inputs.shot}}.usda"
    cache: {version: "3", ttl_secs: 86400, key: ["{{inputs.shot}}", lut-v2]}
  - {id: plain, tool: t, cache: true}
  - {id: off, tool: t, cache: false}
`)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	layout := s.Steps[0]
	if !reflect.DeepEqual(layout.Reads, []string{"assets/{{inputs.shot}}/*.usda", "shots/{{inputs.shot}}/layout.usda"}) ||
		!reflect.DeepEqual(layout.Writes, []string{"out/{{inputs.shot}}.usda"}) {
		t.Fatalf("reads %q writes %q", layout.Reads, layout.Writes)
	}
	c := layout.Policy.Cache
	if c == nil || c.Version != "3" || c.TTLSecs != 86400 || !reflect.DeepEqual(c.Key, []any{"{{inputs.shot}}", "lut-v2"}) {
		t.Fatalf("cache %+v", c)
	}
	if s.Steps[1].Policy.Cache == nil || *s.Steps[1].Policy.Cache != (spec.CachePolicy{}) {
		t.Fatalf("cache: true gives %+v", s.Steps[1].Policy.Cache)
	}
	if s.Steps[2].Policy.Cache != nil {
		t.Fatalf("cache: false gives %+v", s.Steps[2].Policy.Cache)
	}
	canon := string(s.Canonical())
	for _, want := range []string{`"reads":["assets/{{inputs.shot}}/*.usda"`, `"writes":["out/{{inputs.shot}}.usda"]`, `"cache":{"key":["{{inputs.shot}}","lut-v2"],"ttl_secs":86400,"version":"3"}`} {
		if !strings.Contains(canon, want) {
			t.Fatalf("canonical %s lacks %s", canon, want)
		}
	}
	// Without them, the canonical spec (and so the hash of every existing spec) is unchanged.
	plain := mustParse(t, "name: p\nsteps: [{id: a, tool: t}]\n")
	if c := string(plain.Canonical()); strings.Contains(c, "reads") || strings.Contains(c, "cache") {
		t.Fatalf("canonical of a step without asset fields: %s", c)
	}
}

func TestAssetFieldProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, step, code, msg string
	}{
		{"reads not a list", `{id: a, tool: t, reads: {x: 1}}`, spec.CodeWrongType, "`reads` must be a path or a list of paths"},
		{"writes of numbers", `{id: a, tool: t, writes: [1]}`, spec.CodeWrongType, "writes"},
		{"empty path", `{id: a, tool: t, reads: [""]}`, spec.CodeInvalidValue, "`reads` entries must be non-empty"},
		{"malformed template", `{id: a, tool: t, writes: ["out/{{inputs.shot"]}`, spec.CodeInvalidTemplate, "malformed template"},
		{"unknown input", `{id: a, tool: t, reads: ["{{inputs.nope}}"]}`, spec.CodeUnknownTemplateVar, "nope"},
		{"cache of a number", `{id: a, tool: t, cache: 3}`, spec.CodeWrongType, "`cache` must be true, false or a mapping"},
		{"cache unknown field", `{id: a, tool: t, cache: {versoin: "2"}}`, spec.CodeUnknownField, "versoin"},
		{"cache ttl negative", `{id: a, tool: t, cache: {ttl_secs: -1}}`, spec.CodeInvalidPolicy, "cache.ttl_secs"},
		{"cache and idempotency", `{id: a, tool: t, cache: true, idempotency_key: auto}`, spec.CodeInvalidPolicy, "not both"},
		{"cache key template", `{id: a, tool: t, cache: {key: "{{steps.zz.output}}"}}`, spec.CodeUnknownTemplateVar, "zz"},
		{"reads on foreach", `{id: a, kind: foreach, items: [1], reads: [x], steps: [{id: b, tool: t}]}`, spec.CodeUnknownField, "reads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			codes, msgs := codesOf(t, "name: p\ninputs: {shot: {type: string}}\nsteps:\n  - "+tc.step+"\n")
			found := false
			for _, c := range codes {
				found = found || c == tc.code
			}
			if !found || !strings.Contains(msgs, tc.msg) {
				t.Fatalf("codes %v, messages:\n%s\nwant code %s and %q", codes, msgs, tc.code, tc.msg)
			}
		})
	}
}
