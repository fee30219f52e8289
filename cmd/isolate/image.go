package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/isolate-sandbox/isolate/isolate/boxinit"
	"github.com/isolate-sandbox/isolate/langs"
	"github.com/isolate-sandbox/isolate/rootfs"
	"github.com/isolate-sandbox/isolate/rootfs/imagebuild"
)

// imageCommand builds, lists and removes the images: the languages' and
// the templates'.
func imageCommand() *cli.Command {
	usage := func(c *cli.Context, err error, _ bool) error { return usageErr(err) }
	return &cli.Command{
		Name:         "image",
		Usage:        "build, list and remove root file system images: the languages' and templates'",
		OnUsageError: usage,
		Subcommands: []*cli.Command{
			{
				Name:      "build",
				Usage:     "build the images of languages or templates (debootstrap + squashfs; only when their definition changed)",
				ArgsUsage: "LANG... | --all | --template NAME|FILE...",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "all", Usage: "every language"},
					&cli.StringSliceFlag{Name: "template", Usage: "build the image of a template: its `NAME` in " + langs.DefaultTemplatesDir +
						" ($ISOLATE_TEMPLATES_DIR), or its FILE (repeatable)"},
					&cli.StringFlag{Name: "mirror", Usage: "Debian archive `URL` (default: the one in this machine's apt configuration)"},
					&cli.BoolFlag{Name: "force", Usage: "rebuild even when the definition did not change"},
				},
				OnUsageError: usage,
				Action:       imageBuild,
			},
			{
				Name:         "list",
				Usage:        "list the built images",
				Flags:        []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the manifests as JSON"}},
				OnUsageError: usage,
				Action:       imageList,
			},
			{
				Name:         "export",
				Usage:        "write a built image to FILE (its squashfs and manifest), for image import on another host",
				ArgsUsage:    "LANG|IMAGE FILE",
				OnUsageError: usage,
				Action:       imageExport,
			},
			{
				Name:         "import",
				Usage:        "install an image exported by image export, after checking its sha256",
				ArgsUsage:    "FILE",
				OnUsageError: usage,
				Action:       imageImport,
			},
			{
				Name:         "rm",
				Usage:        "remove the images of languages or templates (waits for the runs that use them, and says so)",
				ArgsUsage:    "LANG|IMAGE...",
				OnUsageError: usage,
				Action:       imageRemove,
			},
		},
		Action: func(c *cli.Context) error {
			return usageErr(errors.New("image: expected build, list, export, import or rm (see isolate image --help)"))
		},
	}
}

// langsFromArgs resolves the languages named on the command line (or all).
func langsFromArgs(c *cli.Context, all bool) ([]*langs.Lang, error) {
	if all {
		if c.Args().Len() > 0 {
			return nil, errors.New("give languages or --all, not both")
		}
		return langs.Load()
	}
	if c.Args().Len() == 0 {
		return nil, errors.New("name the languages (isolate langs lists them), or --all")
	}
	var out []*langs.Lang
	for _, name := range c.Args().Slice() {
		l, err := langs.Find(name)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// buildSpec is what rootfs needs to build a language's image.
func buildSpec(l *langs.Lang) *imagebuild.BuildSpec {
	return &imagebuild.BuildSpec{
		Name: l.Image, Suite: l.Suite, Packages: l.Packages, Setup: l.Setup, Version: l.Version,
		Env:  buildVars().Expand(l.Env),
		Hash: l.ImageHash(imagebuild.BuilderVersion),
	}
}

// templateSpec is what rootfs needs to build a template's image. A
// template never takes a language's image name: that image would change
// under the language's runs.
func templateSpec(name string) (*imagebuild.BuildSpec, error) {
	t, err := langs.FindTemplate(name)
	if err != nil {
		return nil, fmt.Errorf("--template: %w", err)
	}
	if all, err := langs.Load(); err == nil {
		for _, l := range all {
			if l.Image == t.Name {
				return nil, fmt.Errorf("--template: template %s (%s): %q is the image of language %s", t.Name, t.Origin, t.Name, l.Name)
			}
		}
	}
	return &imagebuild.BuildSpec{
		Name: t.Name, Kind: "template", Suite: t.Suite, Packages: t.Packages, Files: t.Files, Setup: t.Setup,
		Hash: t.ImageHash(imagebuild.BuilderVersion),
	}, nil
}

// buildVars are the placeholder values at build time: the host's.
func buildVars() langs.Vars {
	return langs.Vars{MemMB: 1024, CPUs: boxinit.NumCPU(), Pids: 256}
}

func imageBuild(c *cli.Context) error {
	if err := requireRoot(); err != nil {
		return err
	}
	var specs []*imagebuild.BuildSpec
	if tpls := c.StringSlice("template"); len(tpls) > 0 {
		if c.Bool("all") || c.Args().Len() > 0 {
			return usageErr(errors.New("give languages, --all or --template, not several"))
		}
		for _, name := range tpls {
			spec, err := templateSpec(name)
			if err != nil {
				return usageErr(err)
			}
			specs = append(specs, spec)
		}
	} else {
		ls, err := langsFromArgs(c, c.Bool("all"))
		if err != nil {
			return usageErr(err)
		}
		for _, l := range ls {
			specs = append(specs, buildSpec(l))
		}
	}
	mirror := c.String("mirror")
	if mirror != "" && !strings.Contains(mirror, "://") {
		return usageErr(fmt.Errorf("--mirror %q: expected a URL", mirror))
	}
	// Progress on a terminal or a log; nothing in CI, where only failures
	// speak.
	var progress func(string)
	if os.Getenv("CI") != "true" {
		progress = func(line string) { fmt.Fprintln(os.Stderr, line) }
	}
	done := map[string]bool{}
	for _, spec := range specs {
		if done[spec.Name] {
			continue
		}
		done[spec.Name] = true
		spec.Mirror, spec.Force, spec.Progress = mirror, c.Bool("force"), progress
		m, built, err := imagebuild.BuildImage(spec)
		if err != nil {
			return failure(err.Error())
		}
		if progress != nil && !built {
			progress(fmt.Sprintf("[%s] up to date (%s, %.1f MiB)", spec.Name, m.Version, float64(m.Size)/(1<<20)))
		}
	}
	return nil
}

// listedImage is a built image with its trees in the cache.
type listedImage struct {
	*rootfs.Manifest
	Trees []rootfs.CachedTree `json:"trees"`
}

func imageList(c *cli.Context) error {
	ms, err := rootfs.ListImages()
	if err != nil {
		return failure(err.Error())
	}
	trees, err := rootfs.ListTrees()
	if err != nil {
		return failure(err.Error())
	}
	if c.Bool("json") {
		out := []listedImage{}
		for _, m := range ms {
			li := listedImage{Manifest: m, Trees: []rootfs.CachedTree{}}
			for _, t := range trees {
				if t.Image == m.Name {
					li.Trees = append(li.Trees, t)
				}
			}
			out = append(out, li)
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(ms) == 0 && len(trees) == 0 {
		fmt.Fprintln(os.Stderr, "no images built (isolate image build --all)")
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "IMAGE\tKIND\tSUITE\tSIZE\tBUILD\tPACKAGES\tVERSION\tBUILT")
	for _, m := range ms {
		kind := m.Kind
		if kind == "" {
			kind = "language"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f MiB\t%.0f s\t%d\t%s\t%s\n", m.Name, kind, m.Suite, float64(m.Size)/(1<<20), m.BuildTime,
			len(m.Installed), m.Version, m.BuiltAt.Format(time.DateTime))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	printTrees(trees)
	return nil
}

// printTrees lists the image cache: the unpacked trees runs bind.
func printTrees(trees []rootfs.CachedTree) {
	if len(trees) == 0 {
		fmt.Println("\nimage cache: empty (a run unpacks its image)")
		return
	}
	fmt.Printf("\nimage cache (%s, unpacked, shared read-only by the runs; isolate cleanup --images removes it):\n", rootfs.TreesDir())
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	for _, t := range trees {
		state := "current"
		if !t.Current {
			state = "old"
		}
		if t.InUse {
			state += ", in use"
		}
		fmt.Fprintf(w, "  %s\t%.1f MiB\t%s\n", filepath.Base(t.Dir), float64(t.Bytes)/(1<<20), state)
	}
	w.Flush()
}

// waitingForRuns says that a removal waits, and for what.
func waitingForRuns(dir string) {
	fmt.Fprintf(os.Stderr, "isolate: waiting for the runs that use %s to end\n", dir)
}

func imageExport(c *cli.Context) error {
	if c.Args().Len() != 2 {
		return usageErr(errors.New("image export: expected LANG FILE"))
	}
	name := imageOf(c.Args().Get(0))
	if _, err := rootfs.LookupImage(name); err != nil {
		return usageErr(err)
	}
	path := c.Args().Get(1)
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return usageErr(fmt.Errorf("image export: %v", err))
	}
	err = rootfs.ExportImage(name, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return failure("image export: " + err.Error())
	}
	return nil
}

func imageImport(c *cli.Context) error {
	if err := requireRoot(); err != nil {
		return err
	}
	if c.Args().Len() != 1 {
		return usageErr(errors.New("image import: expected FILE"))
	}
	m, err := rootfs.ImportFile(c.Args().First())
	if errors.Is(err, rootfs.ErrBadImport) {
		return usageErr(err)
	}
	if err != nil {
		return failure(err.Error())
	}
	fmt.Fprintf(os.Stderr, "isolate: imported image %s (%s, %.1f MiB)\n", m.Name, m.Version, float64(m.Size)/(1<<20))
	return nil
}

// cleanupImages removes the image cache (isolate cleanup --images).
func cleanupImages(c *cli.Context) error {
	if err := requireRoot(); err != nil {
		return err
	}
	if c.Args().Len() > 0 {
		return usageErr(fmt.Errorf("cleanup takes no arguments (got %q)", c.Args().First()))
	}
	if err := rootfs.RemoveTrees("", false, waitingForRuns); err != nil {
		return failure("remove the image cache: " + err.Error())
	}
	return nil
}

// imageOf is the image of a language, or an image named by itself (an
// imported one may have no definition on this host).
func imageOf(arg string) string {
	if l, err := langs.Find(arg); err == nil {
		return l.Image
	}
	return arg
}

func imageRemove(c *cli.Context) error {
	if err := requireRoot(); err != nil {
		return err
	}
	if c.Args().Len() == 0 {
		return usageErr(errors.New("image rm: name the languages or images"))
	}
	names := map[string]bool{}
	for _, arg := range c.Args().Slice() {
		names[imageOf(arg)] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		if err := rootfs.RemoveImage(n, waitingForRuns); err != nil {
			return usageErr(err)
		}
	}
	return nil
}
