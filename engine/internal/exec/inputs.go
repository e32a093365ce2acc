package exec

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// InputProblem is one bad input, as listed in the details of an invalid_input error.
type InputProblem struct {
	Input   string `json:"input"`
	Message string `json:"message"`
}

// CheckInputs checks the inputs of a run against the spec's declarations and returns them with
// defaults applied, as plain JSON values (map[string]any, []any, float64, …). A missing or null
// input takes its default; a missing required input, a value of the wrong type, format or enum,
// and an undeclared name (when the spec declares inputs) are errors. Every problem is reported
// at once in a *run.Error with code invalid_input whose message names the inputs and whose
// Details["problems"] lists them. A spec that declares no inputs accepts any.
func CheckInputs(s *spec.Spec, given map[string]any) (map[string]any, error) {
	values := map[string]any{}
	if len(given) > 0 {
		b, err := json.Marshal(given)
		if err != nil {
			return nil, run.Errorf(run.CodeInvalidInput, "inputs are not JSON-encodable: %v", err)
		}
		if err := (*spec.Object)(&values).UnmarshalJSON(b); err != nil { // large integers stay exact
			return nil, run.Errorf(run.CodeInvalidInput, "inputs are not a JSON object: %v", err)
		}
	}
	if len(s.Inputs) == 0 {
		return values, nil
	}
	var problems []InputProblem
	declared := make([]string, 0, len(s.Inputs))
	isDeclared := make(map[string]bool, len(s.Inputs))
	for _, in := range s.Inputs {
		declared = append(declared, in.Name)
		isDeclared[in.Name] = true
		v, present := values[in.Name]
		if !present || v == nil {
			switch {
			case in.HasDefault:
				values[in.Name] = cloneJSON(in.Default)
			case in.Required:
				typ := in.Type
				if in.Format != "" {
					typ += ", format " + in.Format
				}
				problems = append(problems, InputProblem{in.Name, fmt.Sprintf("input %q is required (%s) and was not given", in.Name, typ)})
			}
			continue
		}
		if err := spec.CheckInputValue(in, v); err != nil {
			problems = append(problems, InputProblem{in.Name, fmt.Sprintf("input %q %s", in.Name, err.Error())})
		}
	}
	var unknown []string
	for name := range values {
		if !isDeclared[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	if len(unknown) > 0 {
		names := strings.Join(declared, ", ")
		for _, name := range unknown {
			problems = append(problems, InputProblem{name, fmt.Sprintf("input %q is not declared by workflow %s (declared: %s)", name, s, names)})
		}
	}
	if len(problems) == 0 {
		return values, nil
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Message
	}
	return nil, &run.Error{Code: run.CodeInvalidInput, Message: strings.Join(msgs, "; "),
		Details: map[string]any{"problems": problems}}
}

// cloneJSON deep-copies a JSON value so a run can never alias the spec's defaults.
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		a := make([]any, len(v))
		for i, e := range v {
			a[i] = cloneJSON(e)
		}
		return a
	}
	return v
}
