package engine

import (
	"fmt"
	"log"
	"regexp"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/resgate"
	"github.com/dcc-flow/dcc-flow/engine/internal/resources"
)

// Bounds of a resource probe's config (ResourceProbe).
const (
	maxProbeEverySecs   = 86400
	maxProbeTimeoutSecs = 600
	maxProbeArgs        = 64
)

// every and timeout are the probe's period and run bound, defaults applied.
func (p *ResourceProbe) every() time.Duration {
	if p.EverySecs == 0 {
		return resources.DefaultProbeEvery
	}
	return time.Duration(p.EverySecs) * time.Second
}

func (p *ResourceProbe) timeout() time.Duration {
	if p.TimeoutSecs == 0 {
		return min(resources.DefaultProbeTimeout, p.every())
	}
	return time.Duration(p.TimeoutSecs) * time.Second
}

// check adds the problems of the probe of resource name, under field f
// ("resources.houdini.probe"): each names the field and the fix.
func (p *ResourceProbe) check(f, name string, ps *configProblems) {
	switch {
	case len(p.Command) == 0:
		ps.add(f+".command", "must be the probe's command as a list of arguments (no shell), e.g. [\"lmutil\", \"lmstat\", \"-f\", %q, \"-c\", \"27000@licsrv\"]", name)
	case len(p.Command) > maxProbeArgs:
		ps.add(f+".command", "has %d arguments; at most %d", len(p.Command), maxProbeArgs)
	case strings.TrimSpace(p.Command[0]) == "":
		ps.add(f+".command[0]", "must name the program to run (a name looked up in PATH or a path), e.g. \"lmutil\"; got %q", p.Command[0])
	}
	if p.EverySecs < 0 || p.EverySecs > maxProbeEverySecs {
		ps.add(f+".every_secs", "must be 0 (the default, %d) or 1 to %d (how often the probe runs); got %d", int(resources.DefaultProbeEvery/time.Second), maxProbeEverySecs, p.EverySecs)
	}
	switch {
	case p.TimeoutSecs < 0 || p.TimeoutSecs > maxProbeTimeoutSecs:
		ps.add(f+".timeout_secs", "must be 0 (the default, %d, or every_secs if lower) or 1 to %d (how long one run may take before it is killed); got %d",
			int(resources.DefaultProbeTimeout/time.Second), maxProbeTimeoutSecs, p.TimeoutSecs)
	case p.TimeoutSecs > 0 && p.EverySecs >= 0 && p.EverySecs <= maxProbeEverySecs && p.timeout() > p.every():
		ps.add(f+".timeout_secs", "is %d but the probe runs every %d s: make timeout_secs at most every_secs", p.TimeoutSecs, int(p.every()/time.Second))
	}
	switch p.Parser {
	case "lmstat":
		if p.Regex != "" {
			ps.add(f+".regex", "is only read with parser \"regex\"; remove it, or set parser to \"regex\"")
		}
		if p.Feature != "" && (len(p.Feature) > 256 || strings.ContainsAny(p.Feature, ": \t\r\n")) {
			ps.add(f+".feature", "must be the feature name as lmstat prints it after \"Users of\" (no spaces or ':', at most 256 bytes); got %q", p.Feature)
		}
	case "regex":
		if p.Feature != "" {
			ps.add(f+".feature", "is only read with parser \"lmstat\"; remove it, or set parser to \"lmstat\"")
		}
		if p.Regex == "" {
			ps.add(f+".regex", "must be a regular expression with one capture group for the free count, e.g. \"free=(\\\\d+)\"")
		} else if re, err := regexp.Compile(p.Regex); err != nil {
			ps.add(f+".regex", "does not compile (RE2 syntax): %v", err)
		} else if re.NumSubexp() != 1 {
			ps.add(f+".regex", "must have exactly one capture group (the free count), e.g. \"free=(\\\\d+)\"; it has %d (write other groups as (?:…))", re.NumSubexp())
		}
	case "":
		ps.add(f+".parser", "must say how to read the probe's output: \"lmstat\" (FlexLM's lmutil lmstat -f FEATURE) or \"regex\" (with regex)")
	default:
		ps.add(f+".parser", "must be \"lmstat\" or \"regex\"; got %q", p.Parser)
	}
}

// probeSpecs returns the probes of the declared resources (validated), nil when none has one.
func (c Config) probeSpecs() []resources.ProbeSpec {
	var out []resources.ProbeSpec
	for name, r := range c.Resources {
		p := r.Probe
		if p == nil {
			continue
		}
		sp := resources.ProbeSpec{Resource: name, Declared: r.Limit, Command: append([]string(nil), p.Command...), Every: p.every(), Timeout: p.timeout()}
		if p.Parser == "regex" {
			sp.Parse = resources.RegexParser(regexp.MustCompile(p.Regex))
		} else {
			feature := p.Feature
			if feature == "" {
				feature = name
			}
			sp.Parse = resources.LmstatParser(feature)
		}
		out = append(out, sp)
	}
	return out
}

// probeWarn writes a probe's change of state (it started failing, failed differently, or works
// again) to the process's log (standard error), once per change.
func probeWarn(_ string, _ resources.ProbeStatus, message string) {
	log.Print("dcc-flow: " + message)
}

// ResourceProbeInfo is the state of a resource's probe, in ResourceInfo.
type ResourceProbeInfo struct {
	// State is "pending" (no run finished yet), "ok" or "failed" (the declared limit holds).
	State string `json:"state"`
	// Free is what the licence server said is free at the last successful run ("ok" only).
	Free *int `json:"free,omitempty"`
	// EffectiveLimit is the limit this engine applies now: min(limit, free + the units its
	// step attempts hold), or the declared limit while pending or failed.
	EffectiveLimit int `json:"effective_limit"`
	// Error says why the last run failed ("failed" only).
	Error string `json:"error,omitempty"`
	// Since is when the state last changed, CheckedAt when the last run ended (absent before).
	Since     *time.Time `json:"since,omitempty"`
	CheckedAt *time.Time `json:"checked_at,omitempty"`
	// EverySecs is the probe's period.
	EverySecs int `json:"every_secs"`
}

// probeInfo is the probe state of resource name in gate g (nil: none declared), nil when it has
// none.
func probeInfo(g *resgate.Gate, name string) *ResourceProbeInfo {
	if g == nil {
		return nil
	}
	st, every, ok := g.Probe(name)
	if !ok {
		return nil
	}
	info := &ResourceProbeInfo{State: st.State, EffectiveLimit: st.Effective, Error: st.Error, EverySecs: int(every / time.Second)}
	if st.State == resources.ProbeOK {
		free := st.Free
		info.Free = &free
	}
	if !st.Since.IsZero() {
		since := st.Since
		info.Since = &since
	}
	if !st.Checked.IsZero() {
		at := st.Checked
		info.CheckedAt = &at
	}
	return info
}

// String is the probe state for messages: "ok: 3 free, effective limit 3".
func (i *ResourceProbeInfo) String() string {
	switch {
	case i == nil:
		return ""
	case i.State == resources.ProbeOK && i.Free != nil:
		return fmt.Sprintf("ok: %d free, effective limit %d", *i.Free, i.EffectiveLimit)
	case i.State == resources.ProbeFailed:
		return "failed: " + i.Error
	}
	return i.State
}
