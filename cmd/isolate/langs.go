package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/rootfs/imagebuild"
)

// langInfo is one line of `isolate langs`.
type langInfo struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases"`
	Title   string   `json:"title"`
	Image   string   `json:"image"`
	Built   bool     `json:"built"`
	// Stale: built, but from another definition (image build rebuilds it).
	Stale   bool     `json:"stale"`
	Version string   `json:"version"`
	Compile []string `json:"compile"`
	Run     []string `json:"run"`
	Origin  string   `json:"origin"`
}

func langsCommand() *cli.Command {
	return &cli.Command{
		Name:  "langs",
		Usage: "list languages, their image and whether it is built",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageErr(err)
		},
		Action: func(c *cli.Context) error {
			all, err := langs.Load()
			if err != nil {
				return usageErr(err)
			}
			infos := make([]langInfo, 0, len(all))
			for _, l := range all {
				info := langInfo{Name: l.Name, Aliases: l.Aliases, Title: l.Title, Image: l.Image, Compile: l.Compile, Run: l.Run, Origin: l.Origin}
				if m, err := rootfs.LookupImage(l.Image); err == nil {
					info.Built, info.Version = true, m.Version
					info.Stale = m.DefinitionHash != l.ImageHash(imagebuild.BuilderVersion)
				}
				infos = append(infos, info)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(infos)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "LANG\tALIASES\tIMAGE\tBUILT\tVERSION")
			for _, i := range infos {
				built, version := "no", "-"
				if i.Built {
					built, version = "yes", i.Version
					if i.Stale {
						built = "stale"
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", i.Name, strings.Join(i.Aliases, ","), i.Image, built, version)
			}
			return w.Flush()
		},
	}
}
