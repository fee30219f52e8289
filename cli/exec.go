package cmdline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/api"
	"github.com/isolate-sandbox/isolate/isolate"
	"github.com/isolate-sandbox/isolate/langs/judge"
)

const execUsage = "compile (if the language compiles) and run one source file"

func (iv *invocation) execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     execUsage,
		ArgsUsage: "--lang LANG [options] SOURCE [-- ARG...]",
		Flags:     iv.runFlags(),
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		Action: iv.execAction,
	}
}

func (iv *invocation) execAction(c *cli.Context) error {
	if err := iv.checkRunner(); err != nil {
		return err
	}
	job, wall, err := iv.execJobFromFlags(c)
	if err != nil {
		return usageErr(flagError(err))
	}
	files, err := iv.openOutputs()
	if err != nil {
		return usageErr(err)
	}
	defer files.close()
	return iv.withRunIO(wall, func(ctx context.Context, stdio isolate.IO) (api.Status, error) {
		rep, err := job.Run(ctx, stdio)
		if err != nil {
			return "", err
		}
		for _, phase := range []*api.Report{rep.Compile, rep.Run} {
			if phase != nil {
				phase.Sandbox.Via = iv.via()
				phase.Message = iv.asGiven(phase.Message)
				iv.settle(phase)
			}
		}
		return rep.Status, iv.emitExecReport(rep, files)
	})
}

// execJobFromFlags checks the command line; nothing is created yet. wall
// is the run's wall-clock limit.
func (iv *invocation) execJobFromFlags(c *cli.Context) (job *judge.Job, wall time.Duration, err error) {
	if iv.values.lang == "" {
		return nil, 0, errors.New("exec: --lang is required (isolate langs lists the languages)")
	}
	if c.Args().Len() == 0 {
		return nil, 0, errors.New("exec: no source file (isolate exec --lang LANG [options] SOURCE [-- ARG...])")
	}
	req, err := iv.specFromFlags(c)
	if err != nil {
		return nil, 0, err
	}
	source := iv.path(c.Args().First())
	if err := iv.checkCallerPaths(req, source); err != nil {
		return nil, 0, err
	}
	host, err := iv.host()
	if err != nil {
		return nil, 0, err
	}
	args := c.Args().Tail()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	job, err = judge.New(host, req, source, args)
	if err != nil {
		return nil, 0, err
	}
	job.SetCaller(iv.cred)
	if iv.Caller != nil && iv.Caller.Capped() && iv.Policy != nil {
		job.CapCompile(iv.Policy.Caps)
	}
	return job, wallLimit(req), nil
}

// emitExecReport prints the outcome as the flags ask: JSON, a report file,
// a meta file of the last phase, or the program's output and a summary.
func (iv *invocation) emitExecReport(rep *api.ExecReport, files *outputFiles) error {
	v := &iv.values
	last := rep.Last()
	if files.report != nil {
		if err := writeJSON(files.report, rep, "  "); err != nil {
			return err
		}
	}
	if v.meta != "" && last != nil {
		if err := iv.writeMeta(files.meta, last); err != nil {
			return err
		}
	}
	if v.json {
		return writeJSON(iv.Stdout, rep, "")
	}
	if rep.Status == api.StatusCE {
		fmt.Fprintln(iv.Stderr, last.Message)
		fmt.Fprintln(iv.Stderr, "isolate: CE (compilation failed)")
		return nil
	}
	if last == nil {
		return nil
	}
	if !v.stream {
		iv.Stdout.WriteString(last.Stdout)
		iv.Stderr.WriteString(last.Stderr)
	}
	fmt.Fprintln(iv.Stderr, summary(last))
	return nil
}
