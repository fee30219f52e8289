package bench

// What the MCP front end adds to a run: run_code of `print(1)` in Python
// through `isolate mcp` (a JSON-RPC request on its stdin, the answer on
// its stdout, as an agent's client sends it) against the same run as a
// POST /v1/exec on the service's socket, in interleaved rounds.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// mcpResult is the MCP front end's cost, medians in ms.
type mcpResult struct {
	API     float64 `json:"api_exec_ms"`
	MCP     float64 `json:"mcp_run_code_ms"`
	Over    float64 `json:"mcp_over_api_ms"`
	Met     bool    `json:"met"` // Over at most mcpTarget
	Skipped string  `json:"skipped,omitempty"`
}

// mcpTarget is how much more a tool call may cost than the API's run.
const mcpTarget = 2.0

const printOne = `{"lang":"python","source":"print(1)"}`

// mcpClient speaks JSON-RPC to `isolate mcp` over its stdin and stdout.
type mcpClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

func startMCP(bin, socket string) (*mcpClient, error) {
	cmd := exec.Command(bin, "mcp", "--socket", socket)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &mcpClient{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	if _, err := c.request("initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"isolate-bench","version":"1"}}`); err != nil {
		c.close()
		return nil, fmt.Errorf("isolate mcp: %w", err)
	}
	if _, err := io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// request sends one request and reads its answer's result.
func (c *mcpClient) request(method, params string) (json.RawMessage, error) {
	c.id++
	if _, err := fmt.Fprintf(c.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", c.id, method, params); err != nil {
		return nil, err
	}
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var ans struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &ans); err != nil {
		return nil, err
	}
	if ans.Error != nil {
		return nil, errors.New(ans.Error.Message)
	}
	return ans.Result, nil
}

// runCode calls run_code with print(1) and insists it printed 1.
func (c *mcpClient) runCode() error {
	res, err := c.request("tools/call", `{"name":"run_code","arguments":{"language":"python","code":"print(1)"}}`)
	if err != nil {
		return err
	}
	if !strings.Contains(string(res), `"stdout":"1\n"`) {
		return fmt.Errorf("run_code: %.300s", res)
	}
	return nil
}

func (c *mcpClient) close() {
	c.in.Close()
	c.cmd.Wait()
}

// measureMCP times run_code(print(1)) through `isolate mcp` against POST
// /v1/exec of the same, rounds interleaved in a random order.
func measureMCP(bin, socket string, rounds int, o *order) (*mcpResult, error) {
	api, err := dialAPI(socket)
	if err != nil {
		return nil, err
	}
	defer api.close()
	exec1 := func() error {
		status, body, err := postJSON(api.conn, api.r, "isolate", "/v1/exec", printOne)
		if err != nil {
			return err
		}
		if status != 200 || !strings.Contains(string(body), `"stdout":"1\n"`) {
			return fmt.Errorf("POST /v1/exec: %d %.300s", status, body)
		}
		return nil
	}
	if err := exec1(); err != nil {
		return &mcpResult{Skipped: err.Error()}, nil // no python image here
	}
	mc, err := startMCP(bin, socket)
	if err != nil {
		return nil, err
	}
	defer mc.close()
	ways := []*timedWay{{name: "api", run: exec1}, {name: "mcp", run: mc.runCode}}
	if err := runRounds(ways, rounds, o); err != nil {
		return nil, err
	}
	res := &mcpResult{API: median(ways[0].samples), MCP: median(ways[1].samples)}
	res.Over = res.MCP - res.API
	res.Met = res.Over <= mcpTarget
	return res, nil
}

// runRounds runs every way once per round, in a fresh random order, after
// the warm-up rounds, keeping each one's samples (ms).
func runRounds(ways []*timedWay, rounds int, o *order) error {
	for round := -warmupRounds; round < rounds; round++ {
		for _, i := range o.next(len(ways)) {
			w := ways[i]
			took, err := timeIt(w.run)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			if round >= 0 {
				w.samples = append(w.samples, took)
			}
		}
	}
	return nil
}

// timeIt is how long run took, in ms.
func timeIt(run func() error) (float64, error) {
	start := time.Now()
	err := run()
	return ms(time.Since(start)), err
}
