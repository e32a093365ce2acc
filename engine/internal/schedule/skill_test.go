package schedule

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const skillMD = "---\nname: scene-maintenance\ndescription: Nightly cleanup.\nmetadata:\n  dcc-mcp:\n    workflow:\n      specs: [workflows.yaml]\n      schedules: [schedules.yaml, more/hourly.yaml, a.schedules.yaml]\n---\n# Scene maintenance\n\nBody text with --- in it.\n"

// The sibling-file pattern: SKILL.md's front matter lists schedule files by any name.
func TestLoadDirReadsTheSchedulesSkillMDLists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"SKILL.md":         skillMD,
		"schedules.yaml":   "schedules:\n  - id: nightly_cleanup\n    workflow: w\n    trigger: {kind: cron, expression: \"0 0 3 * * *\"}\n",
		"more/hourly.yaml": "schedules:\n  - id: hourly\n    workflow: w\n    trigger: {kind: interval, every: 1h}\n",
		"a.schedules.yaml": "schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: webhook, path: /a}\n",
		"other.yaml":       "schedules:\n  - id: not_listed\n",
	})
	specs, err := LoadDir(dir, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.ID)
	}
	// The glob's files first (a.schedules.yaml once, though also listed), then the listed ones.
	if got := strings.Join(ids, ","); got != "a,nightly_cleanup,hourly" {
		t.Fatalf("ids %s", got)
	}
	if specs[2].Source != filepath.Join(dir, "more", "hourly.yaml") {
		t.Errorf("source %q", specs[2].Source)
	}
}

func TestSkillMDProblemsNameTheFileAndEntry(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, skill, want string
		line              int
	}{
		{"missing file", "---\nmetadata:\n  dcc-mcp:\n    workflow:\n      schedules: [nope.yaml]\n---\n",
			`metadata.dcc-mcp.workflow.schedules[0]: "nope.yaml" is not a file in`, 5},
		{"outside", "---\nmetadata:\n  dcc-mcp:\n    workflow:\n      schedules:\n        - ../x.yaml\n---\n",
			`"../x.yaml" is outside the skill's folder`, 6},
		{"not a list", "---\nmetadata:\n  dcc-mcp:\n    workflow:\n      schedules: schedules.yaml\n---\n",
			"must be a list of schedule file names", 5},
		{"not a string", "---\nmetadata:\n  dcc-mcp:\n    workflow:\n      schedules: [{a: 1}]\n---\n",
			"must be a file name such as schedules.yaml", 5},
		{"malformed", "---\nmetadata: [unclosed\n---\n", "the front matter of SKILL.md is malformed YAML: did not find expected", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"SKILL.md": tc.skill})
			_, err := LoadDir(dir, ParseOptions{})
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) != 1 {
				t.Fatalf("LoadDir = %v; want one problem", err)
			}
			p := ve.Problems[0]
			if !strings.Contains(p.Message, tc.want) || p.File != filepath.Join(dir, "SKILL.md") || p.Line != tc.line {
				t.Fatalf("problem %+v; want %q at line %d", p, tc.want, tc.line)
			}
		})
	}
}

// A SKILL.md without front matter, or whose front matter lists no schedules, adds nothing.
func TestSkillMDWithoutAListAddsNothing(t *testing.T) {
	t.Parallel()
	for _, skill := range []string{"# Just docs\n", "---\nname: x\n---\n", "---\nno end\n", "", "---\nmetadata:\n  dcc-mcp:\n    workflow:\n      specs: [w.yaml]\n---\n"} {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"SKILL.md": skill, "schedules.yaml": "schedules: [{id: x}]\n"})
		specs, err := LoadDir(dir, ParseOptions{})
		if err != nil || len(specs) != 0 {
			t.Fatalf("SKILL.md %q: %v %+v", skill, err, specs)
		}
	}
}
