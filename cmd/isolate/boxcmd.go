package main

// `isolate init --box-id N` and `isolate cleanup --box-id N`: persistent
// boxes in ioi/isolate's layout (<box root>/<N>/box), shared with the
// ioi form's --init and --cleanup.

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	cmdline "github.com/isolate-sandbox/isolate/cli"
	"github.com/isolate-sandbox/isolate/isolate"
)

func boxFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "box-id", Aliases: []string{"b"}, Usage: "box `N`"},
		&cli.BoolFlag{Name: "wait", Usage: "wait while another isolate uses the box instead of failing"},
	}
}

func boxInitCommand() *cli.Command {
	return &cli.Command{
		Name:         "init",
		Usage:        "create a persistent box; prints its directory (files put in its box/ appear as /box)",
		Flags:        boxFlags(),
		OnUsageError: func(c *cli.Context, err error, _ bool) error { return usageErr(err) },
		Action: func(c *cli.Context) error {
			cfg, id, err := boxCommandSetup(c)
			if err != nil {
				return err
			}
			dir, err := isolate.InitBox(cfg, id, isolate.Caller(), c.Bool("wait"))
			if err != nil {
				return usageErr(fmt.Errorf("init box %d: %w", id, err))
			}
			fmt.Println(dir)
			return nil
		},
	}
}

func boxCleanupCommand() *cli.Command {
	return &cli.Command{
		Name:  "cleanup",
		Usage: "remove a persistent box (also a half-made one; removing none is no error), or with --images the image cache",
		Flags: append(boxFlags(), &cli.BoolFlag{Name: "images",
			Usage: "remove the unpacked image trees (built images stay; a run unpacks its image again), waiting for the runs that use them"}),
		OnUsageError: func(c *cli.Context, err error, _ bool) error { return usageErr(err) },
		Action: func(c *cli.Context) error {
			if c.Bool("images") && !c.IsSet("box-id") {
				return cleanupImages(c)
			}
			cfg, id, err := boxCommandSetup(c)
			if err != nil {
				return err
			}
			if err := isolate.CleanupBox(cfg, id, c.Bool("wait")); err != nil {
				return usageErr(fmt.Errorf("clean up box %d: %w", id, err))
			}
			return nil
		},
	}
}

// boxCommandSetup checks what init and cleanup need: root, the host's
// configuration, a box id in range and nothing else on the command line.
func boxCommandSetup(c *cli.Context) (*isolate.Config, int, error) {
	if err := requireRoot(); err != nil {
		return nil, 0, err
	}
	if c.Args().Len() > 0 {
		return nil, 0, usageErr(fmt.Errorf("%s takes no arguments (got %q)", c.Command.Name, c.Args().First()))
	}
	if !c.IsSet("box-id") {
		return nil, 0, usageErr(errors.New("--box-id N is required"))
	}
	id, err := cmdline.ParseBoxID(c.String("box-id"))
	if err != nil {
		return nil, 0, usageErr(fmt.Errorf("--box-id %q: %v", c.String("box-id"), err))
	}
	cfg, err := isolate.LoadConfig()
	if err != nil {
		return nil, 0, usageErr(err)
	}
	if id < 0 || id >= cfg.NumBoxes {
		return nil, 0, usageErr(fmt.Errorf("--box-id %d: out of range (0-%d)", id, cfg.NumBoxes-1))
	}
	return cfg, id, nil
}
