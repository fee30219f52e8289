// Package mcp is isolate's Model Context Protocol front end: tools an
// agent calls to run code and commands in boxes and to keep sessions,
// over stdio (`isolate mcp`) or streamable HTTP (the service's /mcp).
//
// It holds no runtime logic: every tool fills a request of the service's
// HTTP API (docs/API.md), sends it through an API (the service's own
// handlers in its process, or its unix socket from a client process) as
// the caller at the other end, and renders the answer as a tool result:
// structured content, and text a model reads. The caller's policy, caps
// and ownership of sessions are the service's, unchanged.
//
// Sessions a connection creates are its own: they end when the
// connection does, unless the tool call asked to keep them (then their
// lease ends them).
package mcp
