package exec_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestInstanceKeys(t *testing.T) {
	t.Parallel()
	for key, want := range map[string][]string{
		"export":                 nil,
		"per_file[3].export":     {"per_file"},
		"outer[1].inner[2].leaf": {"outer", "outer[1].inner"},
		"blk.x":                  {"blk"}, // a dotted key outside an iteration (never built; parsed all the same)
	} {
		if got := exec.EnclosingKeys(key); !reflect.DeepEqual(got, want) {
			t.Errorf("EnclosingKeys(%q) = %q; want %q", key, got, want)
		}
	}
	if exec.InIteration("export") || !exec.InIteration("per_file[3].export") {
		t.Error("InIteration")
	}
}

func TestPlanResume(t *testing.T) {
	t.Parallel()
	s, err := spec.ParseString(`
name: wf
steps:
  - id: list
    tool: flow__echo
  - id: per_file
    kind: foreach
    items: "{{steps.list.output}}"
    steps:
      - {id: export, tool: flow__echo}
      - {id: check, tool: flow__echo}
`)
	if err != nil {
		t.Fatal(err)
	}
	done := func(key, id string) store.Step {
		return store.Step{RunID: "r", Key: key, StepID: id, Status: run.StepCompleted}
	}
	prior := []store.Step{done("list", "list"), done("per_file", "per_file"),
		done("per_file[0].export", "export"), done("per_file[0].check", "check"),
		done("per_file[1].export", "export"), done("per_file[1].check", "check")}
	keys := func(steps []store.Step) []string {
		var out []string
		for _, st := range steps {
			out = append(out, st.Key)
		}
		return out
	}
	for _, tc := range []struct {
		force []string
		want  []string
	}{
		{nil, keys(prior)},
		{[]string{"per_file[1].export"}, []string{"list", "per_file[0].export", "per_file[0].check", "per_file[1].check"}},
		{[]string{"export"}, []string{"list", "per_file[0].check", "per_file[1].check"}},
		{[]string{"list"}, []string{"per_file", "per_file[0].export", "per_file[0].check", "per_file[1].export", "per_file[1].check"}},
	} {
		got, err := exec.PlanResume("r", s, prior, tc.force)
		if err != nil || !reflect.DeepEqual(keys(got), tc.want) {
			t.Errorf("PlanResume(force %q) = %q, %v; want %q", tc.force, keys(got), err, tc.want)
		}
	}
	if len(prior) != 6 || prior[5].Key != "per_file[1].check" {
		t.Fatalf("PlanResume modified prior: %q", keys(prior))
	}
	_, err = exec.PlanResume("r", s, prior, []string{"exprot"})
	if run.CodeOf(err) != run.CodeInvalidRequest {
		t.Fatalf("an unknown force step = %v; want invalid_request", err)
	}
	var re *run.Error
	if !errors.As(err, &re) || re.Details["force_step"] != "exprot" {
		t.Errorf("details %+v", re)
	}
}
