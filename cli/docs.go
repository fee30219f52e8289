//go:build !urfave_cli_no_docs

package cmdline

// A build without the urfave_cli_no_docs tag (the package build's
// documentation step, debian/rules) has hidden commands that write the
// man page and the shell completions from the commands and flags its
// help shows, so that neither is written by hand. Shipped binaries carry
// the tag and link none of the man-page generator.

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

func init() { docCommands = []func() *cli.Command{manCommand, completionCommand} }

// manDescription is the page's DESCRIPTION (markdown): what the
// commands' help does not say.
const manDescription = `isolate runs a program in a fresh box: its own user, PID, mount, network, IPC and UTS
namespaces, a cgroup with CPU, memory and process limits, a seccomp policy, and a read-only root
file system with a writable /box and /tmp. Run by root it does everything itself; run by a member of
the service's socket group it hands the run to **isolate serve** (isolate-serve(1)).

The ioi/isolate 2.x form **isolate** [*OPTIONS*] **--init**|**--run**|**--cleanup** [**--** *COMMAND*...]
takes ioi/isolate's options with their meanings and writes its meta file (**-M**).

Exit status: 0 the program exited 0 within its limits; 1 it failed (RE, SG, TO, ML, CE); 2 usage
error or a failure of the sandbox (XX).

Files: /etc/isolate/config (ioi/isolate's format; where it does not exist, ioi/isolate's own file
/etc/isolate or /usr/local/etc/isolate), /etc/isolate/langs.d, /var/lib/isolate/images
(the language images: **isolate image build --all**), /var/local/lib/isolate (persistent boxes),
/run/isolate (the service's sockets, locks).`

func manCommand() *cli.Command {
	return &cli.Command{
		Name: "help-man", Hidden: true,
		Usage: "write isolate(1) in roff",
		Action: func(c *cli.Context) error {
			c.App.Description = manDescription
			page, err := c.App.ToManWithSection(1)
			if err != nil {
				return Failure("help-man: " + err.Error())
			}
			_, err = io.WriteString(c.App.Writer, page)
			return err
		},
	}
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name: "help-completion", Hidden: true,
		Usage: "write the completion script of SHELL (bash or fish)", ArgsUsage: "SHELL",
		Action: func(c *cli.Context) error {
			switch shell := c.Args().First(); shell {
			case "bash":
				return writeBashCompletion(c.App.Writer, c.App)
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return Failure("help-completion: " + err.Error())
				}
				_, err = io.WriteString(c.App.Writer, script)
				return err
			default:
				return usageErr(fmt.Errorf("help-completion: SHELL must be bash or fish, not %q", shell))
			}
		},
	}
}

// writeBashCompletion writes a bash completion function for app: its
// commands, their subcommands, and each one's flags. A static script:
// completing asks the binary nothing.
func writeBashCompletion(w io.Writer, app *cli.App) error {
	words := map[string][]string{"": visibleNames(app.Commands)}
	var add func(path string, cmds []*cli.Command)
	add = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			key := strings.TrimSpace(path + " " + c.Name)
			words[key] = append(visibleNames(c.Subcommands), completionFlags(c.Flags)...)
			add(key, c.Subcommands)
		}
	}
	add("", app.Commands)
	keys := make([]string, 0, len(words))
	for k := range words {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `# bash completion for %[1]s, written by %[1]s help-completion bash.
_%[1]s() {
	local cur=${COMP_WORDS[COMP_CWORD]} path= i w words
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		case $w in
		--) return ;; # the program's own arguments: files
		-*) ;;
		*) case " $(_%[1]s_words "$path") " in *" $w "*) path=${path:+$path }$w ;; esac ;;
		esac
	done
	words=$(_%[1]s_words "$path")
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$words" -- "$cur"))
	else
		COMPREPLY=($(compgen -W "$(printf '%%s\n' $words | grep -v '^-')" -- "$cur"))
	fi
}
_%[1]s_words() {
	case $1 in
`, app.Name)
	for _, k := range keys {
		fmt.Fprintf(b, "\t%q) echo %q ;;\n", k, strings.Join(words[k], " "))
	}
	fmt.Fprintf(b, "\tesac\n}\ncomplete -o default -F _%[1]s %[1]s\n", app.Name)
	return b.Flush()
}

func visibleNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			names = append(names, c.Name)
		}
	}
	return names
}

func completionFlags(flags []cli.Flag) []string {
	var names []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) == 1 {
				names = append(names, "-"+n)
			} else {
				names = append(names, "--"+n)
			}
		}
	}
	return append(names, "--help")
}
