package remote

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// ReportFunc takes what a remote tool reports while its call runs: its latest progress (from
// notifications/progress) or log lines, or a count of lines the remote dropped (from
// notifications/message whose data names the call's progress token, as a dcc-flow worker sends
// them: docs/guide/pools.md "Progress and logs"). It must not block: it is called on the
// connection's reading goroutine.
type ReportFunc func(progress *run.StepProgress, logs []run.LogLine, dropped int)

type reportKey struct{}

// WithReport returns ctx carrying f: a Call made with it asks the remote for progress (a
// progressToken in the request's _meta) and passes the notifications of that token to f.
func WithReport(ctx context.Context, f ReportFunc) context.Context {
	return context.WithValue(ctx, reportKey{}, f)
}

// The calls that asked for reports, by progress token: process-wide, since tokens are.
var (
	reporting   sync.Map // string token → ReportFunc
	lastToken   atomic.Uint64
	tokenPrefix = "dcc-flow-"
)

// watchReports registers ctx's ReportFunc, if any, for req; the returned function unregisters
// it (call it when the call has returned).
func watchReports(ctx context.Context, req *mcp.CallToolRequest) func() {
	f, _ := ctx.Value(reportKey{}).(ReportFunc)
	if f == nil {
		return func() {}
	}
	token := tokenPrefix + strconv.FormatUint(lastToken.Add(1), 10)
	req.Params.Meta = &mcp.Meta{ProgressToken: token}
	reporting.Store(token, f)
	return func() { reporting.Delete(token) }
}

// onNotification passes a progress or log notification to the call it names; it ignores every
// other notification and those of calls that ended.
func onNotification(n mcp.JSONRPCNotification) {
	fields := n.Params.AdditionalFields
	switch n.Method {
	case string(mcp.MethodNotificationProgress):
		f := reportFor(fields["progressToken"])
		if f == nil {
			return
		}
		done, ok := fields["progress"].(float64)
		if !ok {
			return
		}
		p := &run.StepProgress{Done: done}
		if t, ok := fields["total"].(float64); ok {
			p.Total = &t
		}
		p.Message, _ = fields["message"].(string)
		if p.Check() != "" {
			return
		}
		f(p, nil, 0)
	case "notifications/message":
		data, _ := fields["data"].(map[string]any)
		if data == nil {
			return
		}
		f := reportFor(data["progressToken"])
		if f == nil {
			return
		}
		if n, ok := data["dropped"].(float64); ok && n > 0 && n < 1e9 {
			f(nil, nil, int(n))
			return
		}
		text, _ := data["message"].(string)
		var raw json.RawMessage
		if fl, ok := data["fields"].(map[string]any); ok && len(fl) > 0 {
			raw, _ = json.Marshal(fl)
		}
		f(nil, []run.LogLine{run.LogLineOf(text, raw)}, 0)
	}
}

func reportFor(token any) ReportFunc {
	s, ok := token.(string)
	if !ok {
		return nil
	}
	f, _ := reporting.Load(s)
	rf, _ := f.(ReportFunc)
	return rf
}
