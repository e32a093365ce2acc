package remote

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// TestNotificationsOfACallAreItsReports: notifications/progress and notifications/message naming
// a call's progress token reach its ReportFunc; other tokens, other notifications and the
// notifications after the call are ignored.
func TestNotificationsOfACallAreItsReports(t *testing.T) {
	type got struct {
		p       *run.StepProgress
		logs    []run.LogLine
		dropped int
	}
	var seen []got
	ctx := WithReport(context.Background(), func(p *run.StepProgress, logs []run.LogLine, dropped int) {
		seen = append(seen, got{p, logs, dropped})
	})
	req := mcp.CallToolRequest{}
	done := watchReports(ctx, &req)
	token, _ := req.Params.Meta.ProgressToken.(string)
	if token == "" {
		t.Fatalf("no progress token in the request: %+v", req.Params.Meta)
	}
	send := func(text string) {
		var n mcp.JSONRPCNotification
		if err := json.Unmarshal([]byte(text), &n); err != nil {
			t.Fatal(err)
		}
		onNotification(n)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"` + token + `","progress":37,"total":120,"message":"caching"}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"other","progress":1}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"` + token + `","progress":-1}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"progressToken":"` + token + `","message":"cached","fields":{"frame":37}}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"progressToken":"` + token + `","dropped":50}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"plain text"}}`)
	done()
	send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"` + token + `","progress":40}}`)
	if len(seen) != 3 {
		t.Fatalf("reports %+v", seen)
	}
	if p := seen[0].p; p == nil || p.Done != 37 || *p.Total != 120 || p.Message != "caching" {
		t.Fatalf("progress %+v", seen[0])
	}
	if l := seen[1].logs; len(l) != 1 || l[0].Text != "cached" || string(l[0].Fields) != `{"frame":37}` || l[0].Stream != run.StreamLog {
		t.Fatalf("log %+v", seen[1])
	}
	if seen[2].dropped != 50 {
		t.Fatalf("dropped %+v", seen[2])
	}
}
