package main

import "github.com/urfave/cli/v2"

// `isolate mcp`: the MCP server over stdio, in the service's binary (it
// links the MCP SDK and net/http, which this one-shot binary does not).
func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:            "mcp",
		Usage:           "serve the sandbox's tools to an agent over MCP on stdin/stdout (docs/MCP.md)",
		ArgsUsage:       "[--socket PATH] [--allow-rlimit-only]",
		SkipFlagParsing: true,
		Action:          func(c *cli.Context) error { return execServe("mcp", append([]string{"mcp"}, c.Args().Slice()...)) },
	}
}
