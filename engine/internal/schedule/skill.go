package schedule

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
)

// SkillFile is the name of a skill's description file. Its YAML front matter may list schedule
// files beside it (the sibling-file pattern), which a directory load reads whatever their name:
//
//	---
//	name: scene-maintenance
//	metadata:
//	  dcc-mcp:
//	    workflow:
//	      schedules: [schedules.yaml]
//	---
const SkillFile = "SKILL.md"

// maxSkillBytes bounds how much of SKILL.md is read to find its front matter.
const maxSkillBytes = 1 << 20

// skillSchedules returns the schedule files dir's SKILL.md lists in
// metadata.dcc-mcp.workflow.schedules, as paths relative to dir, with the problems of the list:
// front matter that is not YAML, an entry that is not a string, leaves dir ("../x.yaml",
// "/abs.yaml") or names no regular file. A dir without SKILL.md, or one whose SKILL.md has no
// front matter or no such list, lists nothing and has no problem.
func skillSchedules(dir string) ([]string, []Problem) {
	file := filepath.Join(dir, SkillFile)
	data, err := readSkill(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []Problem{{Code: CodeParseError, File: file, Message: fmt.Sprintf("cannot read %s: %v", SkillFile, err)}}
	}
	front, line, ok := frontMatter(data)
	if !ok {
		return nil, nil
	}
	var doc struct {
		Metadata struct {
			DccMcp struct {
				Workflow struct {
					Schedules yaml.Node `yaml:"schedules"`
				} `yaml:"workflow"`
			} `yaml:"dcc-mcp"`
		} `yaml:"metadata"`
	}
	if err := yaml.Unmarshal(front, &doc); err != nil {
		l, c, msg := yamltext.ErrorPosition(err)
		if l > 0 { // the position is given separately, counted from the file's start
			_, msg, _ = strings.Cut(msg, ": ")
		}
		return nil, []Problem{{Code: CodeParseError, File: file, Line: l + line - 1, Column: c,
			Message: "the front matter of " + SkillFile + " is malformed YAML: " + msg}}
	}
	list := &doc.Metadata.DccMcp.Workflow.Schedules
	if list.Kind == 0 {
		return nil, nil
	}
	const where = "metadata.dcc-mcp.workflow.schedules"
	at := func(n *yaml.Node, path, msg string) Problem {
		return Problem{Code: CodeInvalidValue, File: file, Path: path, Line: n.Line + line - 1, Column: n.Column, Message: msg}
	}
	if list.Kind != yaml.SequenceNode {
		return nil, []Problem{at(list, where, where+" must be a list of schedule file names, e.g. [schedules.yaml]")}
	}
	var names []string
	var problems []Problem
	for i, n := range list.Content {
		path := fmt.Sprintf("%s[%d]", where, i)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" || n.Value == "" {
			problems = append(problems, at(n, path, path+" must be a file name such as schedules.yaml"))
			continue
		}
		rel := filepath.FromSlash(n.Value)
		if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
			problems = append(problems, at(n, path, fmt.Sprintf("%s: %q is outside the skill's folder; list files beside %s (or below it)", path, n.Value, SkillFile)))
			continue
		}
		if st, err := os.Stat(filepath.Join(dir, rel)); err != nil || !st.Mode().IsRegular() {
			problems = append(problems, at(n, path, fmt.Sprintf("%s: %q is not a file in %s; create it or remove it from the list", path, n.Value, dir)))
			continue
		}
		names = append(names, rel)
	}
	return names, problems
}

func readSkill(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxSkillBytes))
}

// frontMatter returns the YAML between a first line "---" and the next line "---" (or "..."),
// and the 1-based line of its first line in data; ok is false when data does not start with one.
func frontMatter(data []byte) (front []byte, line int, ok bool) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	first, rest, found := bytes.Cut(data, []byte("\n"))
	if !found || strings.TrimRight(string(first), " \t\r") != "---" {
		return nil, 0, false
	}
	for off := 0; off < len(rest); {
		end := bytes.IndexByte(rest[off:], '\n')
		var l []byte
		if end < 0 {
			l, end = rest[off:], len(rest)-off
		} else {
			l = rest[off : off+end]
		}
		if s := strings.TrimRight(string(l), " \t\r"); s == "---" || s == "..." {
			return rest[:off], 2, true
		}
		off += end + 1
	}
	return nil, 0, false
}
