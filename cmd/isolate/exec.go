package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/judge"
)

func init() { extraCommands = append(extraCommands, execCommand()) }

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "compile (if the language compiles) and run one source file",
		ArgsUsage: "--lang LANG [options] SOURCE [-- ARG...]",
		Flags:     runFlags(),
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		Action: execAction,
	}
}

func execAction(c *cli.Context) error {
	if err := requireRoot(); err != nil {
		return err
	}
	// What exec creates (the box directory, the source, init's mount
	// points) must be readable by the box user, whatever the caller's
	// umask.
	unix.Umask(0o022)
	job, wall, err := execJobFromFlags(c)
	if err != nil {
		return usageErr(flagError(err))
	}
	if err := checkOutputs(runValues.report, runValues.meta); err != nil {
		return usageErr(err)
	}
	return withRunIO(wall, func(ctx context.Context, stdio isolate.IO) (api.Status, error) {
		rep, err := job.Run(ctx, stdio)
		if err != nil {
			return "", err
		}
		return rep.Status, emitExecReport(rep)
	})
}

// execJobFromFlags checks the command line; nothing is created yet. wall
// is the run's wall-clock limit.
func execJobFromFlags(c *cli.Context) (job *judge.Job, wall time.Duration, err error) {
	if runValues.lang == "" {
		return nil, 0, errors.New("exec: --lang is required (isolate langs lists the languages)")
	}
	if c.Args().Len() == 0 {
		return nil, 0, errors.New("exec: no source file (isolate exec --lang LANG [options] SOURCE [-- ARG...])")
	}
	req, err := specFromFlags(c)
	if err != nil {
		return nil, 0, err
	}
	host, err := isolate.NewHost(nil)
	if err != nil {
		return nil, 0, err
	}
	args := c.Args().Tail()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	job, err = judge.New(host, req, c.Args().First(), args)
	return job, wallLimit(req), err
}

// emitExecReport prints the outcome as the flags ask: JSON, a report file,
// a meta file of the last phase, or the program's output and a summary.
func emitExecReport(rep *api.ExecReport) error {
	last := rep.Last()
	if f := runValues.report; f != "" {
		if err := writeJSON(f, rep); err != nil {
			return err
		}
	}
	if f := runValues.meta; f != "" && last != nil {
		if err := writeMeta(f, last); err != nil {
			return err
		}
	}
	if runValues.json {
		return json.NewEncoder(os.Stdout).Encode(rep)
	}
	if rep.Status == api.StatusCE {
		fmt.Fprintln(os.Stderr, last.Message)
		fmt.Fprintln(os.Stderr, "isolate: CE (compilation failed)")
		return nil
	}
	if last == nil {
		return nil
	}
	if !runValues.stream {
		os.Stdout.WriteString(last.Stdout)
		os.Stderr.WriteString(last.Stderr)
	}
	fmt.Fprintln(os.Stderr, summary(last))
	return nil
}
