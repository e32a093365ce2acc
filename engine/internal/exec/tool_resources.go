package exec

// stepResources are the units of the engine's scarce resources an attempt of sp holds while
// its call runs (docs/guide/resources.md): the step's `resources`, else those its tool was
// registered with (flowtype.ToolInfo.Resources: a host tool's registration); a tool_remote step
// holds only its own. nil when none.
func (r *runner) stepResources(sp *stepPlan) map[string]int {
	if len(sp.st.Resources) > 0 || sp.remote() {
		return sp.st.Resources
	}
	return r.x.cfg.Router.Resources(sp.st.Tool)
}
