package catalog

import (
	"fmt"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The checks of sub-workflows (docs/reference/spec.md, "workflow"): the workflows a spec's workflow steps
// name are walked through the catalog as it is now, and recursion is refused where it is static.

// CheckWorkflows checks, before a run of root starts, the workflows its workflow steps name, all
// the way down: each must be registered (else a *run.Error of code not_found naming the step,
// with a "did you mean"), pass checkTools (its error is returned as is; nil checks nothing), and
// none may lead back to a workflow on the way (a *spec.ValidationError with a problem of code
// cycle). rootName is the name root is known by on the walk (SubmittedName). A spec with no
// workflow step costs one walk of its steps.
func (c *Catalog) CheckWorkflows(root *spec.Spec, rootName string, checkTools func(*spec.Spec) error) error {
	return c.walk(root, rootName, true, checkTools)
}

// CheckRecursion is CheckWorkflows for a registration or a dry run: only recursion is refused (a
// workflow may name one registered later) and no tool is checked.
func (c *Catalog) CheckRecursion(root *spec.Spec, rootName string) error {
	return c.walk(root, rootName, false, nil)
}

// SubmittedName is the name a submitted spec is known by on the walk of its workflows: its own
// name when it is the catalog's workflow of that name (a call of its name is a call of itself),
// else "<name> (submitted)".
func (c *Catalog) SubmittedName(s *spec.Spec) string {
	if reg, ok := c.Get(s.Name); ok && reg.Hash() == s.Hash() {
		return s.Name
	}
	return s.String() + " (submitted)"
}

// walk walks the workflows root's workflow steps name, depth first, through the catalog, with
// root on the stack under rootName (the catalog name it is, or will be, known by). strict: an
// unregistered workflow is an error, and checkTools (if not nil) checks each workflow reached.
func (c *Catalog) walk(root *spec.Spec, rootName string, strict bool, checkTools func(*spec.Spec) error) error {
	checked := map[string]bool{}
	// via is the step of root the walk went down through: problems are reported there, at a
	// line of the text being registered or submitted.
	var visit func(s *spec.Spec, stack []string, via *spec.Step) error
	visit = func(s *spec.Spec, stack []string, via *spec.Step) error {
		var err error
		s.Walk(func(st *spec.Step, _ []*spec.Step) bool {
			if st.Kind != spec.KindWorkflow {
				return true
			}
			at := via
			if at == nil {
				at = st
			}
			name := st.Workflow
			for i, on := range stack {
				if on != name {
					continue
				}
				loop := append(append([]string{}, stack[i:]...), name)
				hint := "remove the call, or move what both need into a workflow of its own that neither calls back"
				msg := fmt.Sprintf("step %q calls workflow %s, which leads back to itself (%s): a workflow cannot run itself as a sub-workflow; %s",
					at.ID, at.Workflow, strings.Join(loop, " → "), hint)
				pos := at.FieldPos("workflow")
				err = &spec.ValidationError{Code: spec.CodeValidationFailed, Source: root.Source(), Problems: []spec.Problem{{
					Code: spec.CodeCycle, Severity: spec.SeverityError, Message: msg, StepID: at.ID, Line: pos.Line, Column: pos.Column, Hint: hint}}}
				return false
			}
			child, ok := c.Get(name)
			if !ok {
				if strict {
					msg := fmt.Sprintf("step %q of workflow %s runs workflow %q, which is not registered", st.ID, stack[len(stack)-1], name)
					if sug := c.Suggest(name); sug != "" {
						msg += fmt.Sprintf("; did you mean %q?", sug)
					}
					err = &run.Error{Code: run.CodeNotFound, StepID: at.ID, Message: msg + "; register it first (register_workflow, --workflows)",
						Details: map[string]any{"workflow": name}}
					return false
				}
				return true
			}
			if checked[name] {
				return true
			}
			if strict && checkTools != nil {
				if err = checkTools(child); err != nil {
					return false
				}
			}
			if err = visit(child, append(stack[:len(stack):len(stack)], name), at); err != nil {
				return false
			}
			checked[name] = true
			return true
		})
		return err
	}
	return visit(root, []string{rootName}, nil)
}
