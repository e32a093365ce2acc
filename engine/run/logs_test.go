package run_test

import (
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestCapLogs(t *testing.T) {
	t.Parallel()
	lines := make([]run.LogLine, run.MaxStepLogLines+5)
	for i := range lines {
		lines[i] = run.LogLine{Stream: run.StreamStdout, Text: "x"}
	}
	lines[len(lines)-1].Text = "newest"
	kept, dropped := run.CapLogs(lines)
	if len(kept) != run.MaxStepLogLines || dropped != 5 || kept[len(kept)-1].Text != "newest" {
		t.Fatalf("line cap: kept %d, dropped %d", len(kept), dropped)
	}

	big := strings.Repeat("a", 100<<10)
	kept, dropped = run.CapLogs([]run.LogLine{{Text: big}, {Text: big}, {Text: big}, {Text: "tail"}})
	if len(kept) != 3 || dropped != 1 || kept[2].Text != "tail" { // 100 + 100 + 4 bytes fit in 256 KiB; a third 100 KiB does not
		t.Fatalf("byte cap: kept %d, dropped %d", len(kept), dropped)
	}

	huge := "é" + strings.Repeat("b", run.MaxStepLogBytes) // the cut falls inside "é"
	kept, dropped = run.CapLogs([]run.LogLine{{Text: "old"}, {Text: huge}})
	if len(kept) != 1 || dropped != 1 || len(kept[0].Text) != run.MaxStepLogBytes || kept[0].Text[0] != 'b' {
		t.Fatalf("one huge line: kept %d (%d bytes), dropped %d", len(kept), len(kept[0].Text), dropped)
	}

	if kept, dropped := run.CapLogs(nil); len(kept) != 0 || dropped != 0 {
		t.Fatalf("nil: %v %d", kept, dropped)
	}
}
