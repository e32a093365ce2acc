// Command mcpdemo serves an in-memory dcc-flow engine over MCP, for interop tests with MCP
// clients written elsewhere (tests/node uses the official TypeScript SDK):
//
//	mcpdemo            serve on stdio
//	mcpdemo -http ADDR serve streamable HTTP on ADDR (e.g. 127.0.0.1:0) and print the endpoint
//	                   URL as the first line of stdout; stops when stdin closes
//
// The catalog holds "gated": an echo step, an approval, an echo step.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

const gated = `
name: gated
description: An echo, a human approval, then a push.
inputs: {shot: {type: string, required: true}}
steps:
  - {id: prep, tool: flow__echo, args: {value: "{{inputs.shot}}"}}
  - {id: human_gate, kind: approve, prompt: "push {{inputs.shot}}?"}
  - {id: push, tool: flow__echo, args: {value: pushed}}
`

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "mcpdemo:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	s, err := spec.ParseString(gated)
	if err != nil {
		return err
	}
	if err := e.Register(s); err != nil {
		return err
	}
	srv := mcpserver.New(e)
	if addr == "" {
		return srv.ServeStdio(ctx, os.Stdin, os.Stdout)
	}
	hs, err := srv.ListenHTTP(addr, "")
	if err != nil {
		return err
	}
	fmt.Println(hs.URL())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin
	return hs.Close(ctx)
}
