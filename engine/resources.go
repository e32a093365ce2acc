package engine

import "github.com/dcc-flow/dcc-flow/engine/spec"

// checkResources fails with a *spec.ValidationError (problems unknown_resource and
// resource_over_limit, naming the step, the field and the fix) when a tool step of s asks for a
// resource the engine's config does not declare, or for more than its limit
// (spec.Spec.CheckResources; docs/guide/resources.md).
func (e *Engine) checkResources(s *spec.Spec) error {
	if s.Resources() == nil {
		return nil
	}
	return s.CheckResources(e.cfg.resourceLimits())
}
