package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kwatch/kwatch/pkg/attach"
	"github.com/kwatch/kwatch/pkg/gotls"
	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/merge"
	"github.com/kwatch/kwatch/pkg/node"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

// nodeOptions are the flags that run kwatch attach and kwatch pcap -i on
// a cluster's nodes (--node, --all-nodes, --node-selector, pod/NAME), and
// the hidden ones of the kwatch that runs there (--agent).
type nodeOptions struct {
	// kube holds kubectl's connection flags (cli-runtime's ConfigFlags).
	kube           *genericclioptions.ConfigFlags
	nodes          []string
	allNodes       bool
	selector       string
	podNamespace   string
	image          string
	pullPolicy     string
	runningTimeout time.Duration
	deadline       time.Duration
	mergeWindow    time.Duration
	// pods are the pod/NAME and deploy/NAME arguments (kwatch attach).
	pods []node.Target
	// agent: this kwatch runs on a node for another (node.Run), its
	// records as JSON Lines on stdout; skipPorts are the ports it leaves
	// out (the kubelet's).
	agent     bool
	skipPorts []uint16
}

// addFlags adds the node flags to fs, after the filters' (whose --server
// and -n stay theirs: the API server is the kubeconfig's, and -n names
// the namespace of pod/NAME on kwatch attach too, targets).
func (o *nodeOptions) addFlags(fs *pflag.FlagSet, attach bool) {
	o.kube = genericclioptions.NewConfigFlags(true)
	o.kube.CacheDir = nil
	o.kube.APIServer = nil
	o.kube.Namespace = nil
	o.kube.AddFlags(fs)
	for name, usage := range kubeFlagUsage {
		if f := fs.Lookup(name); f != nil {
			f.Usage = usage
		}
	}
	for name, usage := range map[string]string{
		"kubeconfig":      "path to the kubeconfig file of the cluster whose nodes to run on (default: $KUBECONFIG, or ~/.kube/config)",
		"request-timeout": "give up on a request to the API server after this long, e.g. 10s (0: never); the nodes' streams run until Ctrl-C",
	} {
		if f := fs.Lookup(name); f != nil {
			f.Usage = usage
		}
	}
	if f := fs.Lookup("namespace"); f != nil && attach {
		f.Usage += "; with pod/NAME or deploy/NAME, their namespace instead, as kubectl's -n (default: the kubeconfig context's)"
	}
	what := "kwatch attach"
	if !attach {
		what = "kwatch pcap -i"
	}
	fs.StringSliceVar(&o.nodes, "node", nil, "run "+what+" on these nodes of the cluster (NODE[,NODE…], repeatable), in a pod each, through the API server; their records merge into one output")
	fs.BoolVar(&o.allNodes, "all-nodes", false, "run "+what+" on every Linux node that is Ready (with --node-selector: those it selects)")
	fs.StringVar(&o.selector, "node-selector", "", "run on the nodes with these labels, e.g. node-role.kubernetes.io/control-plane= (a label selector, as kubectl get nodes -l)")
	fs.StringVar(&o.podNamespace, "pod-namespace", "", "put kwatch's pods in this existing namespace (it must let privileged pods in) instead of kwatch's own, "+node.DefaultNamespace+", made when missing")
	fs.StringVar(&o.image, "image", "kwatch:"+version, "kwatch's image for the pods on nodes (make image writes it; make image-push IMAGE=REGISTRY/kwatch pushes it)")
	fs.StringVar(&o.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "the pods' imagePullPolicy: IfNotPresent, Always or Never")
	o.runningTimeout, o.deadline = node.DefaultRunningTimeout, node.DefaultDeadline
	fs.Var(durationValue{&o.runningTimeout}, "pod-running-timeout", "how long a pod on a node may take to run, e.g. 2m")
	o.mergeWindow = merge.DefaultWindow
	fs.Var(durationValue{&o.mergeWindow}, "merge-window", "how long a node's record waits for earlier records of slower nodes before it is shown, e.g. 5s: longer puts more records in time order, and shows them later")
	fs.Var(durationValue{&o.deadline}, "pod-deadline", "end kwatch's pods after this long whatever becomes of this kwatch (activeDeadlineSeconds), e.g. 8h")
	fs.BoolVar(&o.agent, "agent", false, "run for another kwatch: records as JSON Lines on stdout, first a kwatch record, last an exit record; ends when stdin ends")
	fs.Var(newPortList(&o.skipPorts), "agent-skip-port", "leave out the connections of this port (the kubelet's, which carries this kwatch's own stream)")
	_ = fs.MarkHidden("agent")
	_ = fs.MarkHidden("agent-skip-port")
}

// onNodes says whether the run is on the cluster's nodes.
func (o *nodeOptions) onNodes() bool {
	return len(o.nodes) > 0 || o.allNodes || o.selector != "" || len(o.pods) > 0
}

// validate rejects node flags that do not go together, and those of
// kwatch pcap and attach that make no sense on nodes.
func (o *nodeOptions) validate(cmd *cobra.Command) error {
	if !o.onNodes() {
		for _, name := range []string{"pod-namespace", "image", "image-pull-policy", "pod-running-timeout", "pod-deadline", "merge-window"} {
			if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
				return fmt.Errorf("--%s is for a run on nodes: give --node, --all-nodes, --node-selector or pod/NAME", name)
			}
		}
		return nil
	}
	if o.agent {
		return errors.New("--agent runs on a node already: no --node, --all-nodes or pod/NAME")
	}
	if len(o.nodes) > 0 && (o.allNodes || o.selector != "") {
		return errors.New("--node names nodes; --all-nodes and --node-selector choose them: give one or the other")
	}
	if o.mergeWindow <= 0 || o.runningTimeout <= 0 || o.deadline < time.Second {
		return errors.New("--merge-window, --pod-running-timeout and --pod-deadline take a positive duration, e.g. 30s")
	}
	if _, err := labels.Parse(o.selector); err != nil {
		return fmt.Errorf("--node-selector: %w", err)
	}
	switch corev1.PullPolicy(o.pullPolicy) {
	case corev1.PullIfNotPresent, corev1.PullAlways, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy must be IfNotPresent, Always or Never, not %q", o.pullPolicy)
	}
	for _, name := range []string{"record", "tls-keylog"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return fmt.Errorf("--%s is a file of this machine, and kwatch decodes on the nodes: not with --node, --all-nodes or pod/NAME", name)
		}
	}
	return nil
}

// passed are the flags of kwatch attach and kwatch pcap -i that kwatch on
// each node is given as they were given here: what it decodes and how.
// The output flags (-o, --color, --diff, --report, --all-http,
// --show-undecrypted) act here, on the records read back.
var passed = []string{"port", "client", "server", "user-agent", "resource", "namespace", "exe", "buffer-size", "frames", "show-secrets", "max-event-bytes", "max-inflated-bytes",
	"max-header-bytes", "max-chunk-line-bytes", "max-trailer-bytes", "max-event-chunks", "max-connections",
	"max-buffered-pages", "max-buffered-pages-total", "max-buffered-bytes-total", "gap-timeout"}

// passedArgs are the flags of passed that were given, as arguments (-n
// not when it named the namespace of pod/NAME, targets).
func (o *nodeOptions) passedArgs(cmd *cobra.Command) []string {
	var args []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !slices.Contains(passed, f.Name) || f.Name == "namespace" && len(o.pods) > 0 {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

// targets reads kwatch attach's arguments: pod/NAME and deploy/NAME
// (in the namespace of -n, *namespace, or else the kubeconfig context's)
// go to o.pods, and the process names and PIDs are returned. With pods,
// -n is theirs, as kubectl's is, and no filter of the watches: *namespace
// is emptied.
func (o *nodeOptions) targets(args []string, namespace *string) ([]string, error) {
	var names []string
	ns := *namespace
	for _, arg := range args {
		if !strings.Contains(arg, "/") {
			names = append(names, arg)
			continue
		}
		if ns == "" {
			var err error
			if ns, _, err = o.kube.ToRawKubeConfigLoader().Namespace(); err != nil {
				return nil, fmt.Errorf("%s: the namespace: %w", arg, err)
			}
		}
		t, _, err := node.ParseTarget(arg, ns)
		if err != nil {
			return nil, err
		}
		o.pods = append(o.pods, t)
	}
	if len(o.pods) > 0 && len(names) > 0 && len(o.nodes) == 0 && !o.allNodes && o.selector == "" {
		return nil, fmt.Errorf("%s: a process named beside pod/NAME needs the nodes to look on (--node, --all-nodes); a pod's processes are attached to on its node", names[0])
	}
	if len(o.pods) > 0 {
		*namespace = "" // the pods', not the watches'
	}
	return names, nil
}

// runNodes runs kwatch (command: "attach" or "pcap -i IFACE", with the
// flags of passed given here) on the nodes of the flags, and shows their
// records with p as one run's, through the same health, --diff, report
// and --top as a run here. The run ends when ctx does (Ctrl-C), or when
// cancel is called (q on --top's table).
func (o *nodeOptions) runNodes(ctx context.Context, cancel context.CancelFunc, cmd *cobra.Command, streams IOStreams, d *pcapOptions, p printer.Printer, command, names []string, profile node.Profile) error {
	cfg, err := o.kube.ToRESTConfig()
	if err != nil {
		_ = p.Close()
		return &exitError{code: ExitUsage, err: fmt.Errorf("kubeconfig: %w", err)}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = p.Close()
		return &exitError{code: ExitUsage, err: err}
	}
	host, _ := os.Hostname()
	what := strings.Join(append(slices.Clone(command), names...), " ")
	for _, t := range o.pods {
		what += " " + t.Arg
	}
	var screen *topScreen // --top's table, set before the run starts
	opt := node.Options{Client: cs, Exec: node.NewExec(cfg, cs), Nodes: o.nodes, AllNodes: o.allNodes, Selector: o.selector,
		Pods: o.pods, Command: append(slices.Clone(command), o.passedArgs(cmd)...), Names: names, Profile: profile,
		Namespace: o.podNamespace, Own: o.podNamespace == "", Image: o.image, PullPolicy: corev1.PullPolicy(o.pullPolicy),
		Deadline: o.deadline, RunningTimeout: o.runningTimeout, Window: o.mergeWindow,
		Description: fmt.Sprintf("kwatch %s, run from %s by kwatch %s; kwatch node clean deletes it", what, host, version),
		Notice: func(line string) {
			if screen != nil {
				screen.notice(line)
				return
			}
			fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", line)
		}}
	d.output.ReportTitle = "kwatch " + what
	sink := d.output.sink(p, true)
	screen = d.output.showTop(ctx, streams, cancel)
	res, err := node.Run(ctx, opt, sink)
	screen.stop()
	if err != nil {
		_ = p.Close()
		if ctx.Err() != nil {
			return &exitError{code: ExitInterrupted}
		}
		return &exitError{code: ExitUsage, err: err}
	}
	fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", res.NodesText())
	if l := res.Merge.Late; l > 0 {
		fmt.Fprintf(streams.ErrOut, "kwatch: %d records came more than the merge window after later ones of other nodes: shown out of time order\n", l)
	}
	return d.end(ctx, streams, p, &pcap.Stats{Connections: res.Summary.Connections}, nil)
}

// agent is the output of a kwatch that runs on a node for another: a
// kwatch record once it runs, every record as JSON Lines, and an exit
// record last, after the summary.
type agent struct {
	p       printer.Printer
	command string
	began   bool
}

// agentRun sets up a run for another kwatch: its printer writes every
// record (no health, --diff or report: the reading kwatch makes them),
// and the run ends when stdin ends (the reading kwatch stopped, or went
// away), as Ctrl-C ends one here. It joins the pod's holder (node.Join);
// done releases it.
func agentRun(ctx context.Context, streams IOStreams, command string) (_ context.Context, _ *agent, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, streams.In)
		cancel()
	}()
	release := node.Join()
	a := &agent{p: printer.NewJSON(streams.Out, printer.Options{AllHTTP: true, Wire: true}), command: command}
	return ctx, a, func() { release(); cancel() }
}

// begin writes the kwatch record, once: the run began (attached, capture
// open).
func (a *agent) begin() {
	if a.began {
		return
	}
	a.began = true
	a.p.Emit(&record.Start{Time: time.Now(), Schema: record.SchemaVersion, Version: version, Command: a.command, Node: os.Getenv(node.EnvNode)})
	a.p.Flush()
}

// sink is where the run's records go: to the printer, after the kwatch
// record.
func (a *agent) sink() record.Sink { return agentSink{a} }

// agentSink is an agent's sink; Flush flushes its printer.
type agentSink struct{ a *agent }

// Emit writes r, after the kwatch record.
func (s agentSink) Emit(r record.Record) {
	s.a.begin()
	s.a.p.Emit(r)
}

// Flush writes the lines held.
func (s agentSink) Flush() { s.a.p.Flush() }

// end writes the exit record of the run's error (nil: it ran; an
// exitError: its status; another: it could not run, status 2), closes
// the output and returns the error to exit with: the same status, with
// nothing more said (the exit record says it).
func (a *agent) end(err error) error {
	code, msg := ExitOK, ""
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if ee.err != nil {
			msg = ee.err.Error()
		}
	case err != nil:
		code, msg = ExitUsage, err.Error()
	}
	e := &record.Exit{Time: time.Now(), Code: code, Message: msg}
	switch {
	case code != ExitUsage:
	case errors.Is(err, attach.ErrNoTarget):
		e.Kind = record.ExitNoTarget
	case errors.Is(err, attach.ErrPermission), errors.Is(err, gotls.ErrNotPermitted), errors.Is(err, live.ErrPermission):
		e.Kind = record.ExitPermission
	}
	a.p.Emit(e)
	if cerr := a.p.Close(); cerr != nil && code == ExitOK {
		code = ExitUsage
	}
	if code == ExitOK {
		return nil
	}
	return &exitError{code: code}
}

// finish ends a run that ran, with the exit status end gives here:
// nothing decoded (3), problems or warnings (1), else 0.
func (a *agent) finish(d *pcapOptions, stats *pcap.Stats) error {
	opt := d.readOptions(nil)
	t := a.p.Tally()
	from := d.nothingFrom()
	switch {
	case stats.Unmatched(opt) != "":
		return a.end(&exitError{code: ExitNothing, err: errors.New(stats.Unmatched(opt))})
	case t.NothingDecoded(stats.Connections, from) != "":
		return a.end(&exitError{code: ExitNothing, err: errors.New(t.NothingDecoded(stats.Connections, from))})
	case t.Problems+t.Warnings > 0:
		return a.end(problemsSeen)
	}
	return a.end(nil)
}

func newNodeCommand(streams IOStreams) *cobra.Command {
	c := &cobra.Command{
		Use:   "node",
		Short: "Manage the pods kwatch runs on a cluster's nodes (--node, pod/NAME)",
		Long: `kwatch attach and kwatch pcap -i run on a cluster's nodes with --node,
--all-nodes, --node-selector or pod/NAME: a pod on each node runs kwatch, whose
records come back through the API server. Each run deletes its pods when it
ends; "kwatch node clean" deletes those a killed run left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newNodeCleanCommand(streams), newNodeHoldCommand())
	return c
}

func newNodeCleanCommand(streams IOStreams) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	kube.CacheDir = nil
	var all, force bool
	c := &cobra.Command{
		Use:   "clean",
		Short: "Delete the pods kwatch left on nodes (a kwatch killed before it deleted them)",
		Long: `Delete the pods that a kwatch killed before it deleted them left on nodes
(labelled ` + node.Selector + `) in kwatch's namespace (` + node.DefaultNamespace + `, or
-n NAMESPACE for one a run put them in with --pod-namespace, or -A for
all), and wait until they are gone. A pod whose kwatch went away ends by
itself a minute later; this deletes it at once, ended or not. A running
pod is asked first (through pods/exec) whether a kwatch runs in it: the
pods of a kwatch running now are left, and said, as are pods still
starting and pods that cannot be asked; --force deletes them too (the
kwatch running there then says its streams ended early).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.ToRESTConfig()
			if err != nil {
				return &exitError{code: ExitUsage, err: fmt.Errorf("kubeconfig: %w", err)}
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			ns := node.DefaultNamespace
			if f := cmd.Flags().Lookup("namespace"); f != nil && f.Changed {
				ns = *kube.Namespace
			}
			if all {
				ns = ""
			}
			res, err := node.Clean(cmd.Context(), cs, node.NewExec(cfg, cs), ns, force)
			if res != nil {
				for _, n := range res.Deleted {
					fmt.Fprintf(streams.Out, "pod/%s deleted\n", strings.TrimPrefix(n, ns+"/"))
				}
				for _, n := range res.Left {
					fmt.Fprintf(streams.ErrOut, "kwatch: pod/%s left: %s (--force deletes it)\n", strings.TrimPrefix(n, ns+"/"), res.Why[n])
				}
			}
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			if len(res.Deleted)+len(res.Left) == 0 {
				where := "namespace " + ns
				if ns == "" {
					where = "any namespace"
				}
				fmt.Fprintf(streams.ErrOut, "kwatch: no kwatch pod in %s\n", where)
			}
			return nil
		},
	}
	kube.AddFlags(c.Flags())
	for name, usage := range kubeFlagUsage {
		if f := c.Flags().Lookup(name); f != nil {
			f.Usage = usage
		}
	}
	c.Flags().Lookup("namespace").Usage = "namespace of the pods (default: " + node.DefaultNamespace + ", kwatch's own)"
	c.Flags().BoolVarP(&all, "all-namespaces", "A", false, "delete kwatch's pods in every namespace")
	c.Flags().BoolVar(&force, "force", false, "delete the pods of a kwatch running now too, and those that cannot be asked or are starting")
	return c
}

// newNodeHoldCommand is the main process of kwatch's pod on a node: it
// holds the pod while kwatch runs in it (node.Hold).
func newNodeHoldCommand() *cobra.Command {
	idle := node.DefaultIdle
	var ask bool
	c := &cobra.Command{
		Use:    "hold",
		Short:  "Hold kwatch's pod on a node while kwatch runs in it",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			socket := node.HoldSocket(os.Getenv(node.EnvNamespace), os.Getenv(node.EnvPod))
			if ask {
				n, err := node.Ask(socket)
				if err != nil {
					return &exitError{code: ExitUsage, err: fmt.Errorf("asking the pod's holder: %w", err)}
				}
				fmt.Println(n)
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return node.Hold(ctx, socket, idle)
		},
	}
	c.Flags().Var(durationValue{&idle}, "idle", "end once no kwatch has run in the pod for this long")
	c.Flags().BoolVar(&ask, "ask", false, "print how many kwatch processes run in the pod now (kwatch node clean asks)")
	return c
}
