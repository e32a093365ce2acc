// Package engine is the facade of dcc-flow: the one Go API that every door (the C ABI, MCP,
// webhooks, the CLI through Python) calls.
package engine

// Version is the dcc-flow release version.
const Version = "0.1.0"
