// Package cmd holds kwatch's cobra commands: flags, their validation, and the
// wiring of pkg/ packages. It contains no protocol logic.
package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/klog/v2"
)

// Exit codes of kwatch, documented in README.md.
const (
	// ExitOK: everything decoded without problems.
	ExitOK = 0
	// ExitProblems: the input decoded, but problems or warnings were reported.
	ExitProblems = 1
	// ExitUsage: the flags or the input were unusable (not a capture, a
	// file that cannot be opened, a bad flag).
	ExitUsage = 2
	// ExitNothing: kwatch pcap decoded nothing: no connection carried HTTP
	// it could read (e.g. TLS without keys), or the filters (--port,
	// --client, --server) matched no connection.
	ExitNothing = 3
	// ExitInterrupted: stopped by Ctrl-C before the input ended.
	ExitInterrupted = 130
)

var silenceKlog sync.Once

// version is set at build time with -ldflags "-X github.com/kwatch/kwatch/cmd.version=…".
var version = "dev"

// IOStreams are the standard streams a command uses, passed in so that
// tests can use buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// OutTTY and ErrTTY report whether Out and ErrOut are terminals.
	OutTTY, ErrTTY bool
	// Getenv reads the environment (NO_COLOR, TERM, KUBECONFIG,
	// SSLKEYLOGFILE); nil reads none.
	Getenv func(string) string
	// Program is the name kwatch was started as (the base name of
	// os.Args[0]); "kubectl-kwatch" makes it present itself as the
	// kubectl plugin "kubectl kwatch". Empty means "kwatch".
	Program string
}

// SystemStreams returns the process's stdin, stdout and stderr.
func SystemStreams() IOStreams {
	return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		OutTTY: term.IsTerminal(int(os.Stdout.Fd())), ErrTTY: term.IsTerminal(int(os.Stderr.Fd())),
		Getenv: os.Getenv, Program: filepath.Base(os.Args[0])}
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

// Error returns the wrapped error's text ("" when the output already said it).
func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// Unwrap returns the wrapped error.
func (e *exitError) Unwrap() error { return e.err }

// problemsSeen is returned by a command whose output already reported
// problems: nothing more to print, exit 1.
var problemsSeen = &exitError{code: ExitProblems}

// NewRootCommand builds the kwatch command tree.
func NewRootCommand(streams IOStreams) *cobra.Command {
	return newRootCommand(streams, &profiling{})
}

// newRootCommand builds the kwatch command tree; prof receives --profile
// and --profile-output, and Execute writes the profile when the command
// ends, however it ends.
func newRootCommand(streams IOStreams, prof *profiling) *cobra.Command {
	root := &cobra.Command{
		Use:   "kwatch",
		Short: "Show Kubernetes list-watch traffic as it travels on the wire",
		Long: `kwatch shows Kubernetes watch traffic as it really travels: every watch event
(ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) with the HTTP/1.1 chunk(s) or HTTP/2
DATA frames it arrived in (inflated from gzip, decrypted from TLS with a key
log), decoded from a packet capture (kwatch pcap), from a list-watch of its
own (kwatch stream), or from a running Go program's connections (kwatch
attach: its TLS secrets or state taken from the program itself, the
clients of an attached API server named).

Beyond the wire: a health line for every watch (resourceVersion order, first
event, quiet gaps, bookmark intervals, chunk sizes, framing bytes, restarts),
--diff to see what each MODIFIED event changed, --top for a live table of the
watches, "kwatch stream --record" to save a live session as a pcap, and
"kwatch pcap --follow" for a capture that tcpdump is still writing.`,
		Example: `  # Decode the watch events in a capture, with their chunk sizes
  kwatch pcap testdata/captures/watch-lo.pcap

  # Decode live while tcpdump captures kubectl proxy's port
  tcpdump -i any -s 0 -U -w - port 8001 | kwatch pcap -

  # JSON Lines for jq: the chunk sizes of every event
  kwatch pcap -o json watch.pcap | jq -c 'select(.record=="event") | [.type, .name, [.chunks[].size]]'

  # A live list-watch of ConfigMaps, as an informer makes it, through kubectl proxy
  # (--proxy, $KWATCH_PROXY, or one answering on 127.0.0.1:8001)
  kwatch stream configmaps -n kube-system

  # The same straight to the API server of a kubeconfig, pods and configmaps at once
  kwatch stream pods,configmaps --kubeconfig ~/.kube/config

  # The watches of a running Go program, decrypted, with no key log (root)
  kwatch attach kube-controller-manager

  # Capture live without tcpdump (root)
  kwatch pcap -i lo --port 8001`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version,
	}
	if strings.HasPrefix(streams.Program, "kubectl-") {
		// Installed as a kubectl plugin (kubectl finds kubectl-kwatch on
		// PATH): help and errors say "kubectl kwatch".
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl " + strings.TrimPrefix(streams.Program, "kubectl-")}
	}
	// -v as in kubectl: klog's verbosity for client-go's own logs
	// (-v 6 shows each request, -v 8 the bodies); off by default.
	var verbosity int32
	root.PersistentFlags().Int32VarP(&verbosity, "v", "v", 0, "kwatch stream: number for the log level verbosity of client-go's logs, as in kubectl (6: every request; 8: response bodies too, Secret data included; 0: none)")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	// --version prints what kwatch version prints (the text has no
	// template actions: a version or commit never holds "{{").
	root.SetVersionTemplate(versionText())
	prof.addFlags(root)
	// cobra suggests subcommands ("Did you mean this?"), not flags: an
	// unknown flag is told the closest one the same way.
	root.SetFlagErrorFunc(suggestFlag)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if verbosity < 0 {
			return &exitError{code: ExitUsage, err: fmt.Errorf("-v takes a log level from 0 up, not %d", verbosity)}
		}
		if verbosity > 0 {
			setKlogVerbosity(verbosity, streams.ErrOut)
		}
		return prof.start()
	}
	root.AddCommand(newPcapCommand(streams), newStreamCommand(streams), newAttachCommand(streams), newNodeCommand(streams), newVersionCommand(streams))
	return root
}

// suggestFlag adds to the error of an unknown long flag ("unknown flag:
// --namspace") the command's flag nearest to it, as cobra suggests
// subcommands: within an edit distance of cobra's
// SuggestionsMinimumDistance (2), or a third of the name for long names,
// or one the name is a prefix of. Other flag errors are returned as they
// are.
func suggestFlag(c *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok || name == "" {
		return err
	}
	best, bestDist := "", 0
	visit := func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if best == "" || d < bestDist || d == bestDist && f.Name < best {
			best, bestDist = f.Name, d
		}
	}
	c.Flags().VisitAll(visit)
	c.InheritedFlags().VisitAll(visit)
	if best == "" || bestDist > max(c.SuggestionsMinimumDistance, 2, len(name)/3) {
		return err
	}
	return &flagSuggestion{err: err, flag: best}
}

// flagSuggestion is an unknown flag's error with the flag suggested for it.
type flagSuggestion struct {
	err  error
	flag string
}

// Error says both as cobra says an unknown command and its suggestion.
func (s *flagSuggestion) Error() string {
	return s.err.Error() + "\n\nDid you mean this?\n\t--" + s.flag + "\n"
}

// Unwrap returns the flag error.
func (s *flagSuggestion) Unwrap() error { return s.err }

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Execute runs kwatch with args and returns the process exit code. Errors
// are printed once, here, as "kwatch: …".
func Execute(ctx context.Context, streams IOStreams, args []string) int {
	// client-go logs through klog to stderr (retries, discovery errors)
	// beside kwatch's own messages; kwatch reports what matters itself.
	// Once: klog's logger is a global that client-go reads concurrently.
	silenceKlog.Do(func() { klog.SetLogger(logr.Discard()) })
	prof := &profiling{}
	root := newRootCommand(streams, prof)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	perr := prof.finish()
	if perr != nil {
		fmt.Fprintf(streams.ErrOut, "kwatch: %v\n", perr)
	}
	if err == nil {
		if perr != nil {
			return ExitUsage // the profile asked for was not written
		}
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(streams.ErrOut, "kwatch: %v\n", ee.err)
		}
		return ee.code
	}
	// Flag and argument errors from cobra: point at the help of the
	// command they belong to.
	path := "kwatch"
	if c, _, ferr := root.Find(args); ferr == nil && c != nil {
		path = c.CommandPath()
	}
	fmt.Fprintf(streams.ErrOut, "kwatch: %v\nRun '%s --help' for usage.\n", err, path)
	return ExitUsage
}

// setKlogVerbosity turns client-go's klog output on, at verbosity v, to
// w (kubectl's -v).
func setKlogVerbosity(v int32, w io.Writer) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(int(v)))
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(w)
	klog.ClearLogger()
}

func newVersionCommand(streams IOStreams) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "version",
		Short: "Print kwatch's version",
		Args:  cobra.NoArgs,
		Long: `Print kwatch's version, the commit it was built from (when the build knew
it) and the Go toolchain and platform; -o json prints the same as one JSON
object (version, commit, commitTime, modified, goVersion, platform).`,
		RunE: func(*cobra.Command, []string) error {
			switch output {
			case "":
				_, err := io.WriteString(streams.Out, versionText())
				return err
			case "json":
				b, err := json.MarshalIndent(buildVersion(), "", "  ")
				if err != nil {
					return err
				}
				_, err = streams.Out.Write(append(b, '\n'))
				return err
			}
			return &exitError{code: ExitUsage, err: fmt.Errorf("--output must be json (or left out), not %q", output)}
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "", "json: print the version as a JSON object")
	_ = c.RegisterFlagCompletionFunc("output", fixedCompletion("json"))
	return c
}

// versionInfo is what kwatch knows of its own build.
type versionInfo struct {
	// Version is set at build time (make build: git describe).
	Version string `json:"version"`
	// Commit, CommitTime and Modified are what Go recorded of the VCS
	// checkout it built from (go build in a git checkout records them; go
	// test and go run do not).
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commitTime,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	GoVersion  string `json:"goVersion"`
	Platform   string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

// versionText is what kwatch version prints: the version, the commit and
// the toolchain (buildVersion).
func versionText() string {
	v := buildVersion()
	text := "kwatch " + v.Version + "\n"
	if v.Commit != "" {
		text += "commit: " + v.Commit
		if v.CommitTime != "" {
			text += " (" + v.CommitTime + ")"
		}
		if v.Modified {
			text += ", with uncommitted changes"
		}
		text += "\n"
	}
	return text + "go: " + v.GoVersion + " " + v.Platform + "\n"
}

// getenv reads the environment variable name through streams ("" when
// streams reads none).
func getenv(streams IOStreams, name string) string {
	if streams.Getenv == nil {
		return ""
	}
	return streams.Getenv(name)
}
