#!/bin/bash
# Installs the MCP clients the tests drive isolate's MCP server with, from
# the npm registry, once per machine, and prints their directory:
#   - @modelcontextprotocol/conformance (the protocol's conformance suite),
#   - @modelcontextprotocol/inspector-cli (the Inspector's command line).
# The versions are the newest that run on Node.js 20 (later conformance
# releases need Node 22). Node.js and npm come from Debian where missing.
#   scripts/mcp-clients.sh [DIR]   (default /var/cache/isolate-test/mcp-clients)
set -euo pipefail
dir=${1:-/var/cache/isolate-test/mcp-clients}
conformance=0.1.13
inspector=0.22.0
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
want="conformance@$conformance inspector-cli@$inspector"
if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$want" ]; then
	mkdir -p "$dir"
	(cd "$dir" && npm install --no-audit --no-fund --loglevel=error \
		"@modelcontextprotocol/conformance@$conformance" "@modelcontextprotocol/inspector-cli@$inspector" >/dev/null)
	echo "$want" > "$dir/.installed"
fi
echo "$dir"
