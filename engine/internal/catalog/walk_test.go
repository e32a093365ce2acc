package catalog_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/catalog"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func calls(name string, workflows ...string) string {
	text := "name: " + name + "\nsteps:\n"
	for _, w := range workflows {
		text += "  - {id: call_" + w + ", kind: workflow, workflow: " + w + "}\n"
	}
	if len(workflows) == 0 {
		text += "  - {id: leaf, tool: flow__echo}\n"
	}
	return text
}

func cycleOf(t *testing.T, err error) spec.Problem {
	t.Helper()
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Code != spec.CodeCycle {
		t.Fatalf("want one problem of code cycle, got %v", err)
	}
	return ve.Problems[0]
}

// Register refuses a workflow that leads back to itself through the catalog, at the line of the
// step it goes down through, and accepts one naming a workflow not registered yet.
func TestRegisterRefusesRecursion(t *testing.T) {
	c := catalog.New(catalog.Config{})
	if err := c.Register(parse(t, calls("a", "b"))); err != nil { // b unknown yet: fine
		t.Fatal(err)
	}
	if err := c.Register(parse(t, calls("c"))); err != nil {
		t.Fatal(err)
	}
	b := parse(t, "name: b\nsteps:\n  - {id: first, kind: workflow, workflow: c}\n  - {id: call_a, kind: workflow, workflow: a}\n")
	p := cycleOf(t, c.Register(b))
	if !strings.Contains(p.Message, "b → a → b") || !strings.Contains(p.Message, `step "call_a" calls workflow a`) ||
		p.StepID != "call_a" || p.Line != 4 || p.Hint == "" {
		t.Fatalf("the problem: %+v", p)
	}
	if _, ok := c.Get("b"); ok {
		t.Fatal("a refused workflow was registered")
	}
	p = cycleOf(t, c.Register(parse(t, calls("selfie", "selfie"))))
	if !strings.Contains(p.Message, "selfie → selfie") {
		t.Fatalf("a workflow calling itself: %+v", p)
	}
	// A longer loop is reported at the step of the spec being registered.
	if err := c.Register(parse(t, calls("x", "y"))); err != nil {
		t.Fatal(err)
	}
	if err := c.Register(parse(t, calls("y", "z"))); err != nil {
		t.Fatal(err)
	}
	p = cycleOf(t, c.Register(parse(t, calls("z", "x"))))
	if !strings.Contains(p.Message, "z → x → y → z") || p.StepID != "call_x" {
		t.Fatalf("z → x → y → z: %+v", p)
	}
}

// CheckWorkflows, before a run, wants every workflow reached registered (not_found naming the
// step and a likely name), checks each reached workflow's tools once, and refuses recursion
// under the name the spec is known by.
func TestCheckWorkflowsBeforeARun(t *testing.T) {
	c := catalog.New(catalog.Config{})
	for _, text := range []string{calls("leaf"), calls("mid", "leaf"), calls("top", "mid", "leaf")} {
		if err := c.Register(parse(t, text)); err != nil {
			t.Fatal(err)
		}
	}
	var checked []string
	record := func(s *spec.Spec) error { checked = append(checked, s.Name); return nil }
	top, _ := c.Get("top")
	if err := c.CheckWorkflows(top, c.SubmittedName(top), record); err != nil {
		t.Fatal(err)
	}
	slices.Sort(checked)
	if strings.Join(checked, ",") != "leaf,mid" {
		t.Fatalf("tools checked of %v; want leaf and mid once each", checked)
	}

	// The tool check's error is returned as is.
	bad := errors.New("no tool")
	if err := c.CheckWorkflows(top, "top", func(*spec.Spec) error { return bad }); err != bad {
		t.Fatalf("the tool check's error: %v", err)
	}

	// An unregistered workflow, with a suggestion.
	s := parse(t, calls("submitted", "mids"))
	err := c.CheckWorkflows(s, c.SubmittedName(s), nil)
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeNotFound || re.StepID != "call_mids" || re.Details["workflow"] != "mids" ||
		!strings.Contains(re.Message, `"mids", which is not registered; did you mean "mid"?`) {
		t.Fatalf("unregistered workflow: %v", err)
	}
	// CheckRecursion lets it pass.
	if err := c.CheckRecursion(s, c.SubmittedName(s)); err != nil {
		t.Fatalf("CheckRecursion of an unregistered workflow: %v", err)
	}

	// A submitted spec that is the catalog's own is known by its name; another of the same name
	// is not, so calling the registered one is no recursion.
	if got := c.SubmittedName(top); got != "top" {
		t.Fatalf("SubmittedName of the registered spec: %q", got)
	}
	other := parse(t, calls("leaf", "top"))
	if got := c.SubmittedName(other); !strings.HasSuffix(got, " (submitted)") {
		t.Fatalf("SubmittedName of another spec: %q", got)
	}
	// top → mid → leaf (the registered leaf): no loop back to the submitted spec.
	if err := c.CheckWorkflows(other, c.SubmittedName(other), nil); err != nil {
		t.Fatalf("a submitted spec named like a registered one: %v", err)
	}
	p := cycleOf(t, c.CheckRecursion(other, "leaf"))
	if !strings.Contains(p.Message, "leaf → top → mid → leaf") {
		t.Fatalf("known as leaf: %+v", p)
	}
}
