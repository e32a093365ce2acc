package spec_test

import (
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// codesOf returns the problem codes of a spec that parses but does not validate, or of one that
// does not parse, with their messages for failures.
func codesOf(t *testing.T, text string) ([]string, string) {
	t.Helper()
	var codes, msgs []string
	for _, p := range allProblems(t, text) {
		codes = append(codes, p.Code)
		msgs = append(msgs, p.Message)
	}
	return codes, strings.Join(msgs, "\n")
}

func TestDefaultsDecodeAndCanonical(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
name: d
defaults:
  timeout_secs: 600
  retry: {max_attempts: 3, multiplier: 1.5}
steps:
  - {id: a, tool: t}
`)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Defaults.TimeoutSecs != 600 || s.Defaults.Retry == nil || s.Defaults.Retry.MaxAttempts != 3 || s.Defaults.Retry.Multiplier != 1.5 {
		t.Fatalf("defaults %+v retry %+v", s.Defaults, s.Defaults.Retry)
	}
	want := `"defaults":{"retry":{"backoff":"exponential","initial_delay_ms":500,"jitter":0,"max_attempts":3,"max_delay_ms":10000,"multiplier":1.5,"retry_on":null},"timeout_secs":600}`
	if !strings.Contains(string(s.Canonical()), want) {
		t.Fatalf("canonical %s lacks %s", s.Canonical(), want)
	}
	again, err := spec.Parse(s.Canonical(), spec.Options{})
	if err != nil || again.Hash() != s.Hash() {
		t.Fatalf("round trip: %v %s", err, again.Canonical())
	}
}

// A spec without defaults, multiplier or on_failure keeps the canonical form (so the hash) it had
// before they existed: TestCanonicalFormAndHashAreStable pins those bytes; here, empty values
// are the same as none.
func TestNewFieldsAbsentKeepTheHash(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "name: n\nsteps: [{id: export, tool: maya__export_fbx, retry: {max_attempts: 3}}]\n")
	c := string(s.Canonical())
	for _, absent := range []string{"defaults", "on_failure", "multiplier"} {
		if strings.Contains(c, absent) {
			t.Errorf("canonical %s has %s", c, absent)
		}
	}
	empty := mustParse(t, "name: n\ndefaults: {}\non_failure: []\nsteps: [{id: export, tool: maya__export_fbx, retry: {max_attempts: 3}}]\n")
	if empty.Hash() != s.Hash() {
		t.Fatalf("empty defaults and on_failure change the hash:\n%s\n%s", empty.Canonical(), s.Canonical())
	}
	with := mustParse(t, "name: n\ndefaults: {timeout_secs: 5}\nsteps: [{id: export, tool: maya__export_fbx, retry: {max_attempts: 3}}]\n")
	if with.Hash() == s.Hash() {
		t.Fatal("defaults do not change the hash")
	}
}

func TestDefaultsApplyPrecedence(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
defaults: {timeout_secs: 60, retry: {max_attempts: 2}}
steps:
  - {id: own, tool: t, timeout_secs: 5, retry: {max_attempts: 7}}
  - {id: bare, tool: t}
  - {id: remote, dcc: unreal, tool: t}
  - {id: fan, kind: foreach, items: [1], steps: [{id: inner, tool: t}]}
`)
	engineDefaults := spec.Defaults{TimeoutSecs: 999, Retry: &spec.RetryPolicy{MaxAttempts: 9}}
	cases := []struct {
		id       string
		timeout  float64
		attempts int
	}{{"own", 5, 7}, {"bare", 60, 2}, {"remote", 60, 2}, {"inner", 60, 2}, {"fan", 0, 0}}
	for _, c := range cases {
		to, r := s.Defaults.Apply(s.Find(c.id), engineDefaults)
		attempts := 0
		if r != nil {
			attempts = r.MaxAttempts
		}
		if to != c.timeout || attempts != c.attempts {
			t.Errorf("%s: timeout %v attempts %d; want %v %d", c.id, to, attempts, c.timeout, c.attempts)
		}
	}
	// Engine defaults fill what neither the step nor the spec sets.
	plain := mustParse(t, "defaults: {timeout_secs: 60}\nsteps: [{id: a, tool: t}]\n")
	to, r := plain.Defaults.Apply(plain.Find("a"), engineDefaults)
	if to != 60 || r == nil || r.MaxAttempts != 9 {
		t.Fatalf("timeout %v retry %+v", to, r)
	}
	to, r = spec.Defaults{}.Apply(plain.Find("a"), spec.Defaults{})
	if to != 0 || r != nil {
		t.Fatalf("no defaults: timeout %v retry %+v", to, r)
	}
}

func TestDefaultsAndMultiplierProblems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		text, code, in string
	}{
		{"defaults: {timeout_secs: 0}\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidPolicy, "defaults.timeout_secs: `timeout_secs` must be between 0.001"},
		{"defaults: {retry: {max_attempts: 0}}\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidPolicy, "defaults.retry.max_attempts"},
		{"defaults: {retry: {backoff: fixed}}\nsteps: [{id: a, tool: t}]\n", spec.CodeMissingField, "max_attempts"},
		{"defaults: {idempotency_key: auto}\nsteps: [{id: a, tool: t}]\n", spec.CodeUnknownField, "only retry and timeout_secs have defaults"},
		{"defaults: {retyr: {max_attempts: 2}}\nsteps: [{id: a, tool: t}]\n", spec.CodeUnknownField, `did you mean "retry"?`},
		{"defaults: 5\nsteps: [{id: a, tool: t}]\n", spec.CodeWrongType, "`defaults` must be a mapping"},
		{"steps: [{id: a, tool: t, retry: {max_attempts: 2, multiplier: 0.5}}]\n", spec.CodeInvalidPolicy, "`retry.multiplier` must be between 1 and 100"},
		{"steps: [{id: a, tool: t, retry: {max_attempts: 2, multiplier: 1e3}}]\n", spec.CodeInvalidPolicy, "got 1e3"},
		{"steps: [{id: a, tool: t, retry: {max_attempts: 2, backoff: linear, multiplier: 3}}]\n", spec.CodeInvalidPolicy, "applies to exponential backoff only"},
		{"steps: [{id: a, tool: t, retry: {max_attempts: 2, multiplier: x}}]\n", spec.CodeWrongType, "multiplier"},
	}
	for _, c := range cases {
		codes, msgs := codesOf(t, c.text)
		if len(codes) != 1 || codes[0] != c.code || !strings.Contains(msgs, c.in) {
			t.Errorf("%q: got %v\n%s\nwant one %s containing %q", c.text, codes, msgs, c.code, c.in)
		}
	}
}

func TestMultiplierDelays(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "steps: [{id: a, tool: t, retry: {max_attempts: 6, multiplier: 3, initial_delay_ms: 100, max_delay_ms: 5000}}]\n")
	r := s.Find("a").Policy.Retry
	var got []int64
	for n := 1; n <= 6; n++ {
		got = append(got, r.NextDelayMs(n))
	}
	want := []int64{0, 100, 300, 900, 2700, 5000}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	// Without a multiplier the delays are the doubling ones, exactly as before.
	def := spec.RetryPolicy{MaxAttempts: 2, Backoff: spec.BackoffExponential, InitialDelayMs: 500, MaxDelayMs: 1 << 40}
	two := def
	two.Multiplier = 2
	for n := 1; n <= 40; n++ {
		if def.NextDelayMs(n) != two.NextDelayMs(n) {
			t.Fatalf("attempt %d: default %d, multiplier 2 %d", n, def.NextDelayMs(n), two.NextDelayMs(n))
		}
	}
}

func TestOnFailureDecodeValidateCanonical(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
name: nightly
steps:
  - {id: export, tool: maya__export_fbx}
on_failure:
  - id: alert
    tool: studio__post_slack
    args: {text: "{{run.name}} {{run.id}} failed at {{run.error.step_key}}: {{run.error.kind}} {{run.error.message}}; export was {{steps.export.status}}"}
  - {id: page, tool: studio__page, args: {after: "{{steps.alert.status}}"}}
`)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(s.OnFailure) != 2 || s.OnFailure[0].ID != "alert" || s.Find("page") == nil || s.StepCount() != 3 {
		t.Fatalf("on_failure %v count %d", s.OnFailure, s.StepCount())
	}
	if !strings.Contains(string(s.Canonical()), `"on_failure":[{"args":`) {
		t.Fatalf("canonical %s", s.Canonical())
	}
	again, err := spec.Parse(s.Canonical(), spec.Options{})
	if err != nil || again.Hash() != s.Hash() || len(again.OnFailure) != 2 {
		t.Fatalf("round trip: %v", err)
	}
	cases := []struct {
		text, code, in string
	}{
		{"steps: [{id: a, tool: t}]\non_failure: [{id: a, tool: t}]\n", spec.CodeDuplicateStepID, `duplicate step id "a"`},
		{"steps: [{id: a, tool: t, args: {x: \"{{steps.alert.output}}\"}}]\non_failure: [{id: alert, tool: t}]\n", spec.CodeUnknownTemplateVar, "is an on_failure step"},
		{"steps: [{id: a, tool: t, args: {x: \"{{alert.y}}\"}}]\non_failure: [{id: alert, tool: t}]\n", spec.CodeUnknownTemplateVar, "is an on_failure step"},
		{"steps: [{id: a, tool: t}]\non_failure: [{id: ok, kind: approve, prompt: p}]\n", spec.CodeInvalidValue, "cannot be an approve step"},
		{"steps: [{id: a, tool: t}]\non_failure: [{id: b, tool: t, depends_on: [a]}]\n", spec.CodeUnknownDependency, "not a step of the same list"},
		{"steps: [{id: a, tool: t}]\non_failure: [{id: b, tool: t, args: {x: \"{{nope}}\"}}]\n", spec.CodeUnknownTemplateVar, "on_failure[0]"},
		{"steps: [{id: a, tool: t}]\non_failure: {id: b}\n", spec.CodeWrongType, "must be a list of steps"},
	}
	for _, c := range cases {
		codes, msgs := codesOf(t, c.text)
		if len(codes) != 1 || codes[0] != c.code || !strings.Contains(msgs, c.in) {
			t.Errorf("%q: got %v\n%s\nwant one %s containing %q", c.text, codes, msgs, c.code, c.in)
		}
	}
}
