package engine

import (
	"context"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/remote"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
)

// poolCaller makes tool_remote calls through the MCP client pool of Config.Remotes.
type poolCaller struct{ p *remote.Pool }

func (c poolCaller) CallRemote(ctx context.Context, dcc, tool string, args map[string]any) (tools.Result, error) {
	r, err := c.p.Call(ctx, dcc, tool, args)
	if err != nil {
		return tools.Result{}, err
	}
	if r.IsError {
		return tools.Result{Error: &tools.ToolError{Kind: r.Kind, Message: r.Message, Trace: r.Trace}}, nil
	}
	return tools.Result{Output: r.Output}, nil
}

// newRemotePool builds the MCP client pool of the configured remotes (connections are made on
// first use); their tokens and stdio children's environments come from environ.
func newRemotePool(remotes map[string]RemoteConfig, environ func() []string) (*remote.Pool, error) {
	cfgs := make(map[string]remote.Config, len(remotes))
	for name, r := range remotes {
		cfgs[name] = remote.Config{URL: r.URL, Headers: r.Headers, TokenEnv: r.TokenEnv, Command: r.Command, Env: r.Env,
			Dir: r.Dir, Timeout: time.Duration(r.TimeoutSecs * float64(time.Second))}
	}
	return remote.NewPool(cfgs, remote.WithEnviron(environ))
}
