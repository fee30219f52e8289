package main

// `isolate-serve probe`: GET /v1/health on the service's unix socket,
// with the token when the service has one, for probes that cannot carry
// a secret (a Kubernetes httpGet probe's headers are in the manifest).
// Exit status 0 when the service is ready (with --live: when it answers
// at all, ready or not), 1 when not, 2 on bad flags.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/isolate-sandbox/isolate/service/server"
)

func probe(args []string) error {
	fs := flag.NewFlagSet("isolate-serve probe", flag.ContinueOnError)
	socket := fs.String("socket", server.DefaultSocket, "the service's unix socket")
	tokenFile := fs.String("token-file", "", "the service's bearer token (its --token-file)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	live := fs.Bool("live", false, "succeed when the service answers, ready or not (a liveness probe: a service that cannot make boxes is not ready, but restarting it does not mend the host)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	token, err := tokenOf(*tokenFile)
	if err != nil {
		return err
	}
	status, body, err := getHealth(socketClient(*socket, *timeout), token)
	if err != nil {
		fmt.Fprintln(os.Stderr, "isolate serve probe: "+err.Error())
		os.Exit(1)
	}
	os.Stdout.Write(body)
	if status != http.StatusOK && !(*live && status == http.StatusServiceUnavailable) {
		os.Exit(1)
	}
	return nil
}

// tokenOf is the bearer token in file (--token-file; none when file is
// "").
func tokenOf(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	token, err := server.ReadToken(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %v", err)
	}
	return token, nil
}

// getHealth is the service's answer to GET /v1/health (ready or not),
// asked with token when it is not "": its status and its body, at most
// 64 KiB.
func getHealth(client *http.Client, token string) (status int, body []byte, err error) {
	req, _ := http.NewRequest("GET", "http://isolate/v1/health", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, body, err
}

// socketClient is an HTTP client of the service's unix socket, one
// connection per request, each request bounded by timeout: the
// service's own subcommands (probe, drain, mcp) ask it this way.
func socketClient(socket string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
}
