package cmd

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/kwatch/kwatch/pkg/attach"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/node"
)

type attachOptions struct {
	decode     pcapOptions // the decoding and output flags kwatch pcap has, and the node flags
	exes       []string
	record     string
	ports      []uint16
	containers []string
}

func newAttachCommand(streams IOStreams) *cobra.Command {
	o := &attachOptions{decode: pcapOptions{attached: true}}
	c := &cobra.Command{
		Use:        "attach PID|NAME... | --exe PATH | pod/NAME | deploy/NAME",
		SuggestFor: []string{"trace", "uprobe"},
		Short:      "Show the watches of running Go programs, live and decrypted, with no key log",
		Long: `Attach to running Go programs (a controller, an operator, kubectl, kube-apiserver
itself) and show their watches as they travel, decrypted: the TLS secrets are
taken from each process by an eBPF uprobe on Go's crypto/tls, which derives
every secret of every handshake whether or not the program writes a key log,
and the packets by a live capture in the process's network namespace, kept to
the process's own connections. Nothing in the process changes (an entry probe
only; no restart, no flag).

PID|NAME: processes by PID or by name (as pgrep -x). --exe PATH: every process
of that executable, running now or started later, so that a program's first
handshake is seen; stripped binaries (Kubernetes releases) and PIE are found by
Go's function table. kube-apiserver gives its server side's secrets: every
client's watches on it, each connection noted with the processes at its ends.

A connection open before attach (a controller's one HTTP/2 connection, opened
hours ago) is decrypted from its next records on: its TLS state is read from
the process's memory when it next uses it, for programs built by Go 1.21 to
1.27, stripped or not (of other releases only when the program keeps its
DWARF; else said at attach), found by probes on crypto/tls's (*Conn).Read and
Write that are placed only for processes with connections open at attach and
removed once each is settled; what it sent before attach is not shown.

What it cannot do: a TLS 1.2 session resumed after attach gives no new secret;
programs that are not Go (curl, Python: use SSLKEYLOGFILE and kwatch pcap). On
this machine it needs root with CAP_SYS_ADMIN, CAP_NET_RAW and CAP_SYS_PTRACE
and a kernel with uprobes (on a cluster's nodes, below, kwatch's pods have
them: kubectl's access is enough here). --record writes the packets and the secrets of the connections it
holds: the file decrypts every connection in it; keep it as you would a key.

Filters keep what is shown: --client NAME (a client process, as each
connection's process note names it) or ADDR[:PORT], --server: the other
connections are not decoded; --user-agent TEXT, --resource RESOURCE[.GROUP],
-n NS: the other watches are not decoded into events, and the summary counts
what was left out. A watch whose request came before attach is judged by what
else is seen: its connection's other requests or its client process's name
(User-Agent), its first event (resource); its namespace is not known.

On a cluster's nodes, from anywhere kubectl works: --node NODE[,NODE...],
--all-nodes or --node-selector runs kwatch attach in a pod on each node (kwatch's
image, --image: privileged, in the node's PID and network namespaces) and reads
its records back through the API server (pods/exec); pod/NAME and deploy/NAME
attach to the Go processes of the pods' containers, on their nodes (-n names
their namespace, as kubectl's does, and is then no filter). Every output option
and filter works, each connection names its node, the nodes merge in time
order; the pods are deleted at the end ("kwatch node clean" deletes those a
killed kwatch left). The kubectl flags (--kubeconfig, --context, --as, ...)
choose the cluster. See docs/nodes.md.

Ends on Ctrl-C, or when every process attached to has exited. Exit status: 0
decoded without problems, 1 with problems or warnings, 2 cannot attach, 3
nothing decoded (no connection of the processes carried HTTP kwatch could
read), or the filters matched nothing.`,
		Example: `  # The watches of kube-controller-manager, live
  kwatch attach kube-controller-manager

  # A program from its first handshake on: attach to its executable, then start it
  kwatch attach --exe ./my-controller &
  ./my-controller

  # Every client's watches on the API server, as JSON Lines
  kwatch attach kube-apiserver -o json

  # The same as a live table, one row per watch, sorted by the keys it lists
  kwatch attach kube-apiserver --top

  # The API server's view of one client, or of one resource in one namespace
  kwatch attach kube-apiserver --user-agent kube-controller-manager
  kwatch attach kube-apiserver --resource configmaps -n demo --top

  # Record the session for TShark, Wireshark or kwatch pcap (no key log needed)
  kwatch attach --record session.pcapng 4242
  kwatch pcap session.pcapng

  # From a laptop with kubectl: kube-apiserver on the control-plane nodes
  kwatch attach --node-selector node-role.kubernetes.io/control-plane= kube-apiserver

  # A controller by its pod's name, or its deployment's, on the nodes they run on
  kwatch attach pod/my-controller-7d9c5b-x2x4q -n my-system
  kwatch attach deploy/my-controller -n my-system --diff`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 && len(o.exes) == 0 && len(o.containers) == 0 {
				return fmt.Errorf("name the processes to attach to (PID or name, pod/NAME, deploy/NAME), or --exe PATH")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := o.decode.node.targets(args, &o.decode.filters.namespace)
			if err == nil {
				err = o.decode.validate()
			}
			if err == nil {
				err = o.decode.node.validate(cmd)
			}
			if err == nil && o.decode.node.onNodes() && len(o.containers) > 0 {
				err = fmt.Errorf("--container-id names containers of this machine: on a cluster's nodes, name their pods (pod/NAME)")
			}
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			if o.decode.node.onNodes() {
				o.decode.iface = "attach" // Ctrl-C is how a run ends
				o.decode.attached = true
				// q on --top's table ends the run as Ctrl-C does.
				ctx, cancel := context.WithCancel(cmd.Context())
				defer cancel()
				return o.decode.node.runNodes(ctx, cancel, cmd, streams, &o.decode, o.decode.output.printer(streams, o.decode.allHTTP),
					[]string{"attach"}, names, node.ProfileAttach)
			}
			return o.run(cmd, streams, names)
		},
	}
	fs := c.Flags()
	o.decode.output.addFlags(fs)
	fs.BoolVar(&o.decode.allHTTP, "all-http", false, "also list HTTP exchanges that are not watches")
	o.decode.addDecodeFlags(fs)
	o.decode.filters.addFlags(fs, true)
	fs.StringArrayVar(&o.exes, "exe", nil, "attach to every process of this executable, running now or started later (repeatable)")
	fs.Var(newPortList(&o.ports), "port", "with the /proc fallback, also capture connections to this server port from their first packet (repeatable; 443, 6443, 8443 and the ports the processes use are captured anyway; where the kernel tells connection owners, every connection is captured from its first packet)")
	fs.IntVarP(&o.decode.bufferKiB, "buffer-size", "B", attach.DefaultRingBytes>>10, "the ring in the kernel of each capture (one per network namespace), in KiB (as tcpdump's -B); packets that come while it is full are dropped and counted")
	fs.StringVar(&o.record, "record", "", "also write the packets and the TLS secrets to this pcapng file (Decryption Secrets Blocks: it decrypts with no key log)")
	o.decode.output.addTopFlag(fs)
	fs.StringArrayVar(&o.containers, "container-id", nil, "attach to the Go processes of this container (its ID as crictl ps shows it, 12 hex digits or more), found by their cgroup (repeatable)")
	o.decode.node.addFlags(fs, true)
	_ = c.RegisterFlagCompletionFunc("output", fixedCompletion("pretty", "json"))
	_ = c.RegisterFlagCompletionFunc("color", fixedCompletion("auto", "always", "never"))
	return c
}

func (o *attachOptions) run(cmd *cobra.Command, streams IOStreams, targets []string) error {
	// q on --top's table ends the run as Ctrl-C does.
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	var screen *topScreen // --top's table, set before the run starts
	opt := attach.Options{Targets: targets, Exes: o.exes, Ports: o.ports, Containers: o.containers, RingBytes: o.decode.bufferKiB << 10,
		Read: o.decode.readOptions(keylog.New()),
		Notice: func(line string) {
			if screen != nil {
				screen.notice(line)
				return
			}
			fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", line)
		},
		// The /proc fallback, chosen (docs/attach.md).
		ProcOwners: getenv(streams, "KWATCH_ATTACH_OWNERS") == "proc"}
	if o.record != "" {
		// Opened once attach has its processes: a mistyped PID leaves an
		// earlier recording as it was.
		var f *os.File
		defer func() {
			if f != nil {
				f.Close()
			}
		}()
		opt.Record = func() (io.Writer, error) {
			// Read by its owner only: it holds the keys.
			var err error
			if f, err = os.OpenFile(o.record, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
				return nil, err
			}
			opt.Notice(fmt.Sprintf("%s holds the TLS keys of the connections in it and their bytes as sent (Secrets and bearer tokens included): anyone with the file can read them", o.record))
			return f, nil
		}
	}
	o.decode.file = "attach"
	o.decode.attached = true
	o.decode.iface = "attach" // Ctrl-C is how a run ends
	// On a node, for another kwatch (node.Run).
	if o.decode.node.agent {
		ctx, a, done := agentRun(ctx, streams, "attach")
		defer done()
		opt.Ready, opt.Read.SkipPorts = a.begin, o.decode.node.skipPorts
		res, err := attach.Run(ctx, opt, a.sink())
		if err != nil {
			return a.end(err)
		}
		fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", res.Describe())
		o.decode.openAtAttach = res.OpenAtAttach
		return a.finish(&o.decode, res.Stats)
	}
	p := o.decode.output.printer(streams, o.decode.allHTTP)
	o.decode.output.ReportTitle = "kwatch attach"
	sink := o.decode.output.sink(p, true)
	screen = o.decode.output.showTop(ctx, streams, cancel)
	res, err := attach.Run(ctx, opt, sink)
	screen.stop()
	if err != nil {
		_ = p.Close()
		return &exitError{code: ExitUsage, err: err}
	}
	if res.Exited {
		// said before the summary line below
		fmt.Fprintf(streams.ErrOut, "kwatch: every process attached to has exited\n")
	}
	fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", res.Describe())
	o.decode.openAtAttach = res.OpenAtAttach
	return o.decode.end(ctx, streams, p, res.Stats, nil)
}
