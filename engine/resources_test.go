package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// A run whose step asks for a resource the engine does not declare, or for more than its
// limit, is refused when it starts, naming the step, the field and the fix; one within the
// limits starts. An engine config with a zero limit does not open.
func TestSubmitChecksResources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Resources: map[string]engine.ResourceConfig{"houdini": {Limit: 4}, "gpu": {Limit: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	submit := func(text string) error {
		s, err := spec.ParseString(text)
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
		if err == nil {
			if _, err := e.Wait(ctx, id, 0); err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	err = submit("steps: [{id: cook, tool: flow__echo, resources: {houdinni: 1}}]")
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Code != spec.ResourceUnknown ||
		!strings.Contains(ve.Problems[0].Message, `step "cook"`) && !strings.Contains(ve.Problems[0].Message, `(id "cook")`) ||
		!strings.Contains(ve.Problems[0].Message, `did you mean "houdini"?`) {
		t.Fatalf("unknown resource: %v", err)
	}
	if run.CodeOf(err) != spec.CodeValidationFailed {
		t.Fatalf("code %q", run.CodeOf(err))
	}
	err = submit("steps: [{id: cook, tool: flow__echo, resources: {gpu: 3}}]")
	if !errors.As(err, &ve) || ve.Problems[0].Code != spec.ResourceOverLimit || !strings.Contains(ve.Problems[0].Message, "ask for at most 2") {
		t.Fatalf("over the limit: %v", err)
	}
	if err := submit("priority: 10\nsteps: [{id: cook, tool: flow__echo, resources: {gpu: 2, houdini: 1}}]"); err != nil {
		t.Fatal(err)
	}

	_, err = engine.Open(ctx, engine.Config{Resources: map[string]engine.ResourceConfig{"gpu": {}}})
	if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "resources.gpu.limit: must be 1 to 1,000,000") {
		t.Fatalf("a zero limit: %v", err)
	}
}
