package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The asset resources (docs/reference/mcp.md, "Resources and notifications"): a file's lineage
// and the stale recorded outputs (Engine.Lineage, Engine.Stale). They send no updates: read
// them again.
const (
	lineageURIPrefix = "dccflow://lineage/" // + the path, percent-encoded as one URI segment
	staleURI         = "dccflow://stale"
	staleURIPrefix   = staleURI + "/" // + a file or directory, percent-encoded likewise
	// maxResourceDepth bounds ?depth= of the lineage resource.
	maxResourceDepth = 100
)

func (s *Server) addAssetResources() {
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(lineageURIPrefix+"{path}{?depth}", "file lineage",
		mcp.WithTemplateDescription(fmt.Sprintf(
			"How a file came to be: the run, step, attempt, tool, arguments and environment that wrote it, and the files it read, "+
				"recursively (depth levels of writers, default %d, at most %d), each with its state now (unchanged, changed, missing, unreadable). "+
				"path is the file's absolute path percent-encoded as one segment (encodeURIComponent: / is %%2F).",
			engine.DefaultLineageDepth, maxResourceDepth)),
		mcp.WithTemplateMIMEType("application/json")),
		s.readLineage)
	s.mcp.AddResource(mcp.NewResource(staleURI, "stale outputs",
		mcp.WithResourceDescription("Every recorded output that is stale: modified or deleted since it was made, or made from an input whose content changed since (transitively), with the reason and the attempt that made it."),
		mcp.WithMIMEType("application/json")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return s.stale(ctx, staleURI, nil)
		})
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(staleURIPrefix+"{path}", "stale outputs under a path",
		mcp.WithTemplateDescription("The stale recorded outputs at a file or under a directory (as dccflow://stale). path is absolute, percent-encoded as one segment (encodeURIComponent)."),
		mcp.WithTemplateMIMEType("application/json")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			p := templateArg(req, "path")
			if p == "" {
				return nil, assetError(req.Params.URI, &run.Error{Code: run.CodeInvalidRequest,
					Message: "no path: give a file or directory, percent-encoded (dccflow://stale/%2Fshots%2Fsh010), or read dccflow://stale for every output"})
			}
			return s.stale(ctx, req.Params.URI, []string{p})
		})
}

// readLineage answers dccflow://lineage/{path}{?depth}: the lineage graph (engine.LineageNode).
func (s *Server) readLineage(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	p := templateArg(req, "path")
	if p == "" {
		return nil, assetError(uri, &run.Error{Code: run.CodeInvalidRequest,
			Message: "no path: give the file's absolute path percent-encoded as one segment, e.g. dccflow://lineage/%2Fshots%2Fsh010.usda"})
	}
	depth := 0
	if d := templateArg(req, "depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > maxResourceDepth {
			return nil, assetError(uri, &run.Error{Code: run.CodeInvalidRequest,
				Message: fmt.Sprintf("depth %q must be a whole number from 1 to %d (levels of writers; default %d)", d, maxResourceDepth, engine.DefaultLineageDepth)})
		}
		depth = n
	}
	n, err := s.e.Lineage(ctx, p, depth)
	if err != nil {
		return nil, assetError(uri, err)
	}
	return textResource(uri, n)
}

// stale answers the stale resources: {"stale": [StaleFile...]}, by path.
func (s *Server) stale(ctx context.Context, uri string, paths []string) ([]mcp.ResourceContents, error) {
	out, err := s.e.Stale(ctx, paths)
	if err != nil {
		return nil, assetError(uri, err)
	}
	return textResource(uri, map[string]any{"stale": out})
}

// templateArg is the value of a template variable mcp-go matched (percent-decoded), "" when absent.
func templateArg(req mcp.ReadResourceRequest, name string) string {
	switch v := req.Params.Arguments[name].(type) {
	case string:
		return v
	case []string: // what mcp-go v1.2.1 gives: uritemplate's values
		return strings.Join(v, ",")
	}
	return ""
}

// assetError is a read error of an asset resource: "CODE: message (URI)" with the engine's
// stable code. mcp-go sends every resource handler error as JSON-RPC -32603, so the code
// travels in the message.
func assetError(uri string, err error) error {
	code := run.CodeOf(err)
	msg := err.Error()
	var re *run.Error
	if errors.As(err, &re) && re.Message != "" {
		msg = re.Message
	}
	return fmt.Errorf("%s: %s (%s)", code, msg, uri)
}
