// Package toolcheck decides whether the tools and remotes a spec calls can be called: by this
// engine before a run starts (Scope.Unknown, Scope.Err: unknown_tool with "did you mean"
// suggestions and notes naming the step), and by the other engines of a shared database before
// a run is handed to them (CanRun). It reads the spec's calls as the executor compiles them
// (exec.Executor.Tools) and knows nothing of the engine facade.
package toolcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Others is what the other engines attached to a shared database advertise (cluster.Queue).
type Others interface {
	// HostedNow reports whether a live engine hosts tool.
	HostedNow(tool string) bool
	// HasRemoteNow reports whether a live engine has the remote (worker pool, MCP server) name.
	HasRemoteNow(name string) bool
}

// Scope is what one engine can call.
type Scope struct {
	Router *tools.Router
	// Remotes are the remotes of the engine's config.
	Remotes map[string]bool
	// Others is nil when the database is not shared.
	Others Others
}

// known reports whether tool is registered here or hosted by another engine.
func (k Scope) known(tool string) bool {
	_, ok := k.Router.Lookup(tool)
	return ok || k.Others != nil && k.Others.HostedNow(tool)
}

// Unknown lists, of the calls a spec makes (toolNames and remotes, from exec.Executor.Tools),
// the tools that are not registered and the "dcc/tool" of its tool_remote steps (and tool steps
// routed to a pool) whose remote is not configured, sorted, with suggestions (Suggest) and
// notes: for each "dcc/tool", and each tool of a pool step left in-process, which step calls it
// and why it is unknown ("step export: remote …"). On a shared database a tool another attached
// engine hosts, and a remote another attached engine has, are known (their calls go through
// the tool-call queue, docs/operations/cluster.md). A step's own `pool:` that no engine has runs
// in-process: then its tool must be known. All three are nil when every call is known.
func (k Scope) Unknown(toolNames []string, remotes []exec.RemoteTool) (unknown []string, suggestions, notes map[string]string) {
	for _, name := range toolNames {
		if !k.known(name) {
			unknown = append(unknown, name)
		}
	}
	notes = map[string]string{}
	nowhere := "is not in the engine config's remotes"
	if k.Others != nil {
		nowhere = "is neither in this engine's config nor advertised by an engine attached to the database"
	}
	for _, rt := range remotes {
		switch {
		case k.Remotes[rt.DCC] && k.Router.HasRemoteNamed(rt.DCC):
		case k.Others != nil && k.Others.HasRemoteNow(rt.DCC):
		case rt.Optional:
			if !k.known(rt.Tool) {
				unknown = append(unknown, rt.Tool)
				if _, ok := notes[rt.Tool]; !ok {
					notes[rt.Tool] = fmt.Sprintf("step %s: pool %q %s, so the tool runs in-process", rt.Step, rt.DCC, nowhere)
				}
			}
		default:
			name := rt.DCC + "/" + rt.Tool
			unknown = append(unknown, name)
			if _, ok := notes[name]; !ok {
				notes[name] = fmt.Sprintf("step %s: remote %q %s", rt.Step, rt.DCC, nowhere)
			}
		}
	}
	slices.Sort(unknown)
	unknown = slices.Compact(unknown)
	if len(unknown) == 0 {
		return nil, nil, nil
	}
	return unknown, k.Suggest(unknown), notes
}

// Suggest maps each unknown tool name to the registered tool it is most likely a typo of
// (yamltext.Suggest: at most two edits), and each unknown "dcc/tool" of a tool_remote step to
// the configured remote its dcc is most likely a typo of ("dcc/tool" → "remote/tool"). Names
// with no close match are absent; the map is empty, not nil, when nothing matches.
func (k Scope) Suggest(unknown []string) map[string]string {
	out := map[string]string{}
	var toolNames, remotes []string
	for _, t := range k.Router.Tools() {
		toolNames = append(toolNames, t.Name)
	}
	for name := range k.Remotes {
		remotes = append(remotes, name)
	}
	slices.Sort(remotes)
	for _, u := range unknown {
		if dcc, tool, ok := strings.Cut(u, "/"); ok {
			if sug := yamltext.Suggest(dcc, remotes); sug != "" {
				out[u] = sug + "/" + tool
			}
			continue
		}
		if sug := yamltext.Suggest(u, toolNames); sug != "" {
			out[u] = sug
		}
	}
	return out
}

// Err is the unknown_tool error of workflow s for what Unknown found; nil when unknown is
// empty. Its message names each tool with its suggestion and note, and says where a remote
// must be; its details hold "tools", and "notes" and "suggestions" when there are some.
func (k Scope) Err(s *spec.Spec, unknown []string, suggestions, notes map[string]string) error {
	if len(unknown) == 0 {
		return nil
	}
	named := make([]string, len(unknown))
	for i, u := range unknown {
		named[i] = u
		if sug, ok := suggestions[u]; ok {
			named[i] += fmt.Sprintf(" (did you mean %q?)", sug)
		}
		if note, ok := notes[u]; ok {
			named[i] += " (" + note + ")"
		}
	}
	msg := fmt.Sprintf("workflow %s uses unknown tools: %s", s, strings.Join(named, ", "))
	if slices.ContainsFunc(unknown, func(u string) bool { return strings.Contains(u, "/") }) {
		switch {
		case k.Others != nil:
			msg += "; tool_remote and pool steps need their remote in the engine config's remotes, or a worker engine that has it attached to the database (dcc-flow worker --db URL --remotes FILE)"
		case k.Router.HasRemote():
			msg += "; tool_remote and pool steps need their remote in the engine config's remotes"
		default:
			msg += "; this engine has no remote caller for tool_remote steps"
		}
	}
	details := map[string]any{"tools": unknown}
	if len(notes) > 0 {
		details["notes"] = notes // "remote/tool", or a pool step's tool → which step, and why
	}
	if len(suggestions) > 0 {
		details["suggestions"] = suggestions
	}
	return &run.Error{Code: run.CodeUnknownTool, Message: msg, Details: details}
}

// Capabilities are what the other live engines on a shared database host, together.
type Capabilities struct {
	Tools, Remotes map[string]bool
}

// Specs is what CanRun reads of the engine: the calls of a spec and the catalog's workflows.
type Specs struct {
	Calls    func(*spec.Spec) ([]string, []exec.RemoteTool, error)
	Workflow func(name string) (*spec.Spec, bool)
	// Builtin reports whether tool is a built-in tool, which every engine has.
	Builtin func(tool string) bool
}

// CanRun reports whether an engine with c's tools and remotes (and the built-in tools every
// engine has) can run every tool step and remote call of s, and of the catalog workflows its
// workflow steps run, all the way down (one not in the catalog: false).
func CanRun(s *spec.Spec, sp Specs, c Capabilities) bool {
	return canRunWithin(s, sp, c, map[string]bool{})
}

func canRunWithin(s *spec.Spec, sp Specs, c Capabilities, seen map[string]bool) bool {
	ok := true
	s.Walk(func(st *spec.Step, _ []*spec.Step) bool {
		if st.Kind != spec.KindWorkflow || seen[st.Workflow] {
			return ok
		}
		seen[st.Workflow] = true
		child, found := sp.Workflow(st.Workflow)
		ok = found && canRunWithin(child, sp, c, seen)
		return ok
	})
	if !ok {
		return false
	}
	toolNames, remotes, err := sp.Calls(s)
	if err != nil {
		return false
	}
	has := func(tool string) bool { return sp.Builtin(tool) || c.Tools[tool] }
	for _, t := range toolNames {
		if !has(t) {
			return false
		}
	}
	for _, rt := range remotes {
		if !c.Remotes[rt.DCC] && !(rt.Optional && has(rt.Tool)) {
			return false
		}
	}
	return true
}
