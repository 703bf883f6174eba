package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/node"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/wire"
)

// progressMinBytes is the smallest capture file that gets a progress bar.
const progressMinBytes = 16 << 20

type pcapOptions struct {
	output outputOptions
	port   int
	// filters are --client, --server, --user-agent, --resource and -n.
	filters         filterOptions
	showUndecrypted bool
	// bufferKiB is --buffer-size: a live capture's ring, in KiB.
	bufferKiB int
	// attached: the run is kwatch attach's (its messages speak of the
	// processes, not of a capture and key logs; --client takes a process
	// name too).
	attached bool
	// openAtAttach counts the TCP connections the attached processes had
	// open when kwatch attached (attach.Result.OpenAtAttach).
	openAtAttach       int
	allHTTP            bool
	maxHeaderBytes     int
	follow             bool
	file               string
	maxConnections     int
	maxLineBytes       int
	maxTrailer         int
	maxEventChunks     int
	bufferedPages      int
	bufferedTotal      int
	bufferedBytesTotal int64
	gapTimeout         time.Duration
	tlsKeylog          string
	// iface is -i: a live capture on this interface instead of a file.
	iface string
	// node holds the flags that run the capture (kwatch attach: the
	// attach) on a cluster's nodes.
	node nodeOptions
}

func newPcapCommand(streams IOStreams) *cobra.Command {
	o := &pcapOptions{}
	c := &cobra.Command{
		Use:        "pcap FILE | -i IFACE",
		SuggestFor: []string{"read", "capture", "decode", "tcpdump"},
		Short:      "Decode watch events and their chunks from a packet capture",
		Long: `Read a pcap or pcapng capture (gzip'd or not; "-" reads stdin), reassemble its
TCP connections, parse HTTP/1.1 (and HTTP/2) and decode every watch response
into watch events, each shown with the chunk(s) (or DATA frames) that carried it.

Link types: Ethernet, Linux SLL and SLL2 (tcpdump -i any), BSD loopback (macOS
lo0), raw IP; IPv4 and IPv6. TLS connections (e.g. straight to the API server's
port 6443) are decrypted with a key log: --tls-keylog FILE, the SSLKEYLOGFILE
environment variable, or Decryption Secrets Blocks inside a pcapng; the
decrypted bytes are decoded as HTTP/1.1 or HTTP/2.

TLS connections that cannot be decrypted (no key for them) are counted in one
line before the summary, not shown one by one; --show-undecrypted lists each.

Filters keep what is shown: --port, --client, --server: the other connections
are not decoded; --user-agent, --resource, -n: the other watches are not
decoded into events; the summary counts what they left out.

Exit status: 0 decoded without problems, 1 decoded with problems or warnings,
2 unusable input or flags, 3 nothing decoded (no connection carried HTTP kwatch
could read, or --port, --client, --server matched none, or --user-agent,
--resource, -n matched no watch), 130 interrupted by Ctrl-C (with --follow or
-i, Ctrl-C is how it ends: 0, 1 or 3).

-i IFACE captures live instead, as tcpdump -i does ("any": every interface),
in pure Go (a packet socket: root or CAP_NET_RAW), filtered in the kernel to
TCP (and to --port when given), with loopback's second copy of each packet
dropped; what the kernel dropped because kwatch fell behind is said at the end.

-i IFACE with --node NODE[,NODE...], --all-nodes or --node-selector captures on a
cluster's nodes, from anywhere kubectl works: a pod on each node (kwatch's image,
--image; in the node's network namespace, with CAP_NET_RAW only) runs kwatch pcap
-i there and its records come back through the API server, the nodes merged in
time order, each connection naming its node. See docs/nodes.md.`,
		Example: `  # Capture a watch through kubectl proxy, then decode it
  tcpdump -i any -s 0 -U --immediate-mode -B 65536 -w watch.pcap port 8001 &
  curl -N '127.0.0.1:8001/api/v1/namespaces/default/configmaps?watch=1'
  kwatch pcap watch.pcap

  # Capture live, without tcpdump: the watches through kubectl proxy
  kwatch pcap -i lo --port 8001

  # The same as a live table, one row per watch, sorted by the keys it lists
  kwatch pcap -i lo --port 8001 --top

  # The same on two nodes of a cluster, from a laptop with kubectl
  kwatch pcap -i any --port 8001 --node worker-1,worker-2

  # Decode live, event by event, as tcpdump hands packets over
  tcpdump -i any -s 0 -U -w - port 8001 | kwatch pcap -

  # Follow a capture file that tcpdump is still writing
  kwatch pcap --follow watch.pcap

  # Decrypt a capture of the API server's TLS port with the client's key log
  # (curl from an address of its own, so that the capture holds it alone)
  tcpdump -i lo -s 0 -U --immediate-mode -B 65536 -w api.pcap 'host 127.9.9.9 and port 6443' &
  SSLKEYLOGFILE=keys.log curl -sk -N --http2 --interface 127.9.9.9 -H "Authorization: Bearer $TOKEN" \
    'https://127.0.0.1:6443/api/v1/namespaces/default/configmaps?watch=1' &
  kwatch pcap --tls-keylog keys.log api.pcap     # once curl and tcpdump are stopped

  # A node's capture of port 6443: one client's connections only
  kwatch pcap --tls-keylog keys.log --client 10.0.0.7 --server 10.0.0.2:6443 node.pcap

  # The watches of kubectl only; of the ConfigMaps of namespace demo only
  kwatch pcap --tls-keylog keys.log --user-agent kubectl node.pcap
  kwatch pcap --tls-keylog keys.log --resource configmaps -n demo node.pcap

  # Show the framing bytes of each chunk, and also the non-watch requests
  kwatch pcap --wire --all-http watch.pcap

  # JSON Lines: event type, object name and chunk sizes
  kwatch pcap -o json watch.pcap | jq -c 'select(.record=="event") | [.type, .name, [.chunks[].size]]'`,
		Args: func(_ *cobra.Command, args []string) error {
			if o.iface != "" {
				if len(args) != 0 {
					return fmt.Errorf("-i %s captures live: give no capture file (got %q)", o.iface, args[0])
				}
				return nil
			}
			if len(args) != 1 {
				return fmt.Errorf("want one capture file (or - for stdin), got %d arguments", len(args))
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"pcap", "pcapng", "gz"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.file = args[0]
			}
			err := o.validate()
			if err == nil {
				err = o.node.validate(cmd)
			}
			if err == nil && (o.node.onNodes() || o.node.agent) && o.iface == "" {
				err = fmt.Errorf("on a cluster's nodes kwatch pcap captures live: give -i IFACE (any: every interface)")
			}
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			if o.output.Top && o.iface == "" && !o.follow {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--top shows a live capture: use it with -i IFACE or --follow FILE")}
			}
			return o.run(cmd, streams)
		},
	}
	fs := c.Flags()
	o.output.addFlags(fs)
	fs.IntVar(&o.port, "port", 0, "only connections with this TCP port on either side (default: all)")
	o.filters.addFlags(fs, false)
	fs.BoolVar(&o.showUndecrypted, "show-undecrypted", false, "list every TLS connection that could not be decrypted, with why (default: counted in one line before the summary)")
	fs.IntVarP(&o.bufferKiB, "buffer-size", "B", live.DefaultRingBytes>>10, "with -i: the capture's ring in the kernel, in KiB (as tcpdump's -B); packets that come while it is full are dropped and counted")
	fs.StringVarP(&o.iface, "interface", "i", "", `capture live on this interface ("any": all) instead of reading a file; needs root or CAP_NET_RAW`)
	fs.BoolVar(&o.allHTTP, "all-http", false, "also list HTTP exchanges that are not watches")
	fs.BoolVarP(&o.follow, "follow", "f", false, "keep reading a capture file that tcpdump is still writing, like tail -f; wait for a file not created yet, like tail -F (Ctrl-C ends)")
	o.addDecodeFlags(fs)
	o.output.addTopFlag(fs)
	fs.StringVar(&o.tlsKeylog, "tls-keylog", "", "TLS key log (NSS format, as SSLKEYLOGFILE or Go's KeyLogWriter write it) to decrypt TLS connections with (default: $SSLKEYLOGFILE); re-read when it grows")
	o.node.addFlags(fs, false)
	_ = c.RegisterFlagCompletionFunc("output", fixedCompletion("pretty", "json"))
	_ = c.RegisterFlagCompletionFunc("color", fixedCompletion("auto", "always", "never"))
	return c
}

// addDecodeFlags adds the flags that tune decoding and bound its memory,
// which kwatch pcap and kwatch attach share.
func (o *pcapOptions) addDecodeFlags(fs *pflag.FlagSet) {
	fs.Var(newIntSize(&o.maxHeaderBytes, exchange.DefaultMaxHeaderBytes), "max-header-bytes", "largest HTTP header section, in bytes or as a quantity (e.g. 1Mi)")
	fs.Var(newIntSize(&o.maxLineBytes, chunk.DefaultMaxLineBytes), "max-chunk-line-bytes", "longest chunk-size line (and trailer line), in bytes or as a quantity (e.g. 4Ki)")
	fs.Var(newIntSize(&o.maxTrailer, chunk.DefaultMaxTrailerBytes), "max-trailer-bytes", "largest trailer section after the last chunk, in bytes or as a quantity (e.g. 64Ki)")
	fs.IntVar(&o.maxEventChunks, "max-event-chunks", event.DefaultMaxSpans, "most chunks listed for one watch event (it still decodes beyond)")
	fs.IntVar(&o.maxConnections, "max-connections", pcap.DefaultMaxConnections, "most TCP connections followed at once; past it the longest idle are dropped and reported")
	fs.IntVar(&o.bufferedPages, "max-buffered-pages", pcap.DefaultMaxBufferedPerConn, "out-of-order data one connection may buffer while a segment is missing, in reassembly pages of about 1900 bytes")
	fs.IntVar(&o.bufferedTotal, "max-buffered-pages-total", pcap.DefaultMaxBufferedTotal, "out-of-order data buffered over all connections, in pages of about 1900 bytes")
	fs.Var(newByteSize(&o.bufferedBytesTotal, event.DefaultBudgetBytes, math.MaxInt64), "max-buffered-bytes-total", "header sections and watch events in progress held over all connections, in bytes or as a quantity (e.g. 256Mi); what does not fit is reported and skipped")
	o.gapTimeout = pcap.DefaultGapTimeout
	fs.Var(durationValue{&o.gapTimeout}, "gap-timeout", "capture time data may wait behind a missing segment before the gap is reported and skipped, e.g. 2s")
}

func fixedCompletion(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

func (o *pcapOptions) validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	if o.port < 0 || o.port > 65535 {
		return fmt.Errorf("--port must be between 1 and 65535 (0, the default, means every port), not %d", o.port)
	}
	if min := live.MinRingBytes >> 10; o.bufferKiB < min || o.bufferKiB > 4<<20 {
		return fmt.Errorf("--buffer-size is in KiB, between %d and %d (4 GiB), not %d", min, 4<<20, o.bufferKiB)
	}
	if err := o.filters.validate(o.attached); err != nil {
		return err
	}
	o.output.Filter = o.filters.watches
	if o.iface != "" && o.follow {
		return fmt.Errorf("-i captures live; --follow is for a capture file that grows")
	}
	if o.follow && o.file == "-" {
		return fmt.Errorf("--follow reads a file that grows; stdin is already read as it comes")
	}
	if o.output.Report != "" && o.file != "-" && o.iface == "" {
		in, err1 := os.Stat(o.file)
		out, err2 := os.Stat(o.output.Report)
		if err1 == nil && err2 == nil && os.SameFile(in, out) {
			return fmt.Errorf("--report %s is the capture being read; name another file", o.output.Report)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--max-header-bytes", o.maxHeaderBytes}, {"--max-chunk-line-bytes", o.maxLineBytes}, {"--max-trailer-bytes", o.maxTrailer},
		{"--max-event-chunks", o.maxEventChunks}, {"--max-connections", o.maxConnections},
		{"--max-buffered-pages", o.bufferedPages}, {"--max-buffered-pages-total", o.bufferedTotal}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, not %d", f.name, f.v)
		}
	}
	if o.bufferedBytesTotal <= 0 {
		return fmt.Errorf("--max-buffered-bytes-total must be positive, not %d", o.bufferedBytesTotal)
	}
	if o.gapTimeout <= 0 {
		return fmt.Errorf("--gap-timeout must be positive")
	}
	return nil
}

func (o *pcapOptions) run(cmd *cobra.Command, streams IOStreams) error {
	// q on --top's table ends the run as Ctrl-C does.
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	if o.node.onNodes() {
		return o.node.runNodes(ctx, cancel, cmd, streams, o, o.printer(streams), []string{"pcap", "-i", o.iface}, nil, node.ProfileCapture)
	}
	if o.iface != "" {
		return o.runInterface(ctx, streams, cancel)
	}
	in, closeInput, err := o.openInput(ctx, streams)
	if errors.Is(err, errCtrlCBeforeInput) {
		return o.interruptedBeforeInput()
	} else if err != nil {
		return err
	}
	defer closeInput()
	keys, err := o.keys(streams)
	if err != nil {
		return err
	}
	p := o.printer(streams)
	o.output.ReportTitle = "kwatch pcap " + o.file
	opt := o.readOptions(keys)
	sink := o.output.sink(p, true)
	screen := o.output.showTop(ctx, streams, cancel)
	stats, err := pcap.Read(ctx, in, opt, sink)
	screen.stop()
	return o.end(ctx, streams, p, stats, err)
}

// printer is the output printer of the flags.
func (o *pcapOptions) printer(streams IOStreams) printer.Printer {
	return o.output.printerWith(streams, func(opt *printer.Options) {
		opt.AllHTTP = o.allHTTP
		opt.HideUndecrypted = !o.showUndecrypted
	})
}

// readOptions are pcap.Options from the flags, with keys.
func (o *pcapOptions) readOptions(keys *keylog.Log) pcap.Options {
	opt := pcap.Options{
		Keys: keys,
		// Keys may come after the connections that need them only
		// while the capture is live: a key log and a capture being
		// written at the same time.
		WaitForKeys:        o.live(),
		Name:               o.file,
		Port:               uint16(o.port),
		MaxConnections:     o.maxConnections,
		MaxBufferedPerConn: o.bufferedPages,
		MaxBufferedTotal:   o.bufferedTotal,
		GapTimeout:         o.gapTimeout,
		HTTP: wire.Options{Limits: exchange.Limits{
			MaxHeaderBytes:   o.maxHeaderBytes,
			MaxEventBytes:    o.output.MaxEventBytes,
			MaxInflatedBytes: o.output.MaxInflatedBytes,
			MaxEventChunks:   o.maxEventChunks,
			Chunk:            chunk.Limits{MaxLineBytes: o.maxLineBytes, MaxTrailerBytes: o.maxTrailer},
			Decode:           event.DecodeOptions{ShowSecrets: o.output.ShowSecrets},
			Budget:           event.NewBudget(o.bufferedBytesTotal),
		},
			HTTP2Frames: o.output.Frames,
		},
	}
	o.filters.apply(&opt)
	return opt
}

// live says that the capture is read as it is written (stdin, --follow,
// -i): key logs may still grow.
func (o *pcapOptions) live() bool { return o.follow || o.file == "-" || o.iface != "" }

// runInterface is kwatch pcap -i: a live capture decoded as it comes, until
// Ctrl-C (or q on --top's table: cancel).
func (o *pcapOptions) runInterface(ctx context.Context, streams IOStreams, cancel context.CancelFunc) error {
	keys, err := o.keys(streams)
	if err != nil {
		return err
	}
	var f live.Filter
	if o.port != 0 {
		f.Ports = []uint16{uint16(o.port)}
	} else if o.filters.serverEnd.Port != 0 {
		f.Ports = []uint16{o.filters.serverEnd.Port}
	}
	c, err := live.Open(live.Options{Interface: o.iface, Filter: f, RingBytes: o.bufferKiB << 10})
	if err != nil {
		code := ExitUsage
		return &exitError{code: code, err: fmt.Errorf("-i %s: %w", o.iface, err)}
	}
	defer c.Close()
	o.file = c.Name()
	what := "TCP"
	if o.port != 0 {
		what = fmt.Sprintf("TCP port %d", o.port)
	}
	fmt.Fprintf(streams.ErrOut, "kwatch: capturing %s on %s (Ctrl-C ends)\n", what, c.Name())
	// On a node, for another kwatch (node.Run).
	if o.node.agent {
		ctx, a, done := agentRun(ctx, streams, "pcap -i")
		defer done()
		a.begin()
		opt := o.readOptions(keys)
		opt.Name, opt.SkipPorts = "-i "+c.Name(), o.node.skipPorts
		return a.finish(o, pcap.ReadLive(ctx, c, opt, a.sink()))
	}
	p := o.printer(streams)
	o.output.ReportTitle = "kwatch pcap -i " + c.Name()
	opt := o.readOptions(keys)
	opt.Name = "-i " + c.Name()
	sink := o.output.sink(p, true)
	screen := o.output.showTop(ctx, streams, cancel)
	stats := pcap.ReadLive(ctx, c, opt, sink)
	screen.stop()
	return o.end(ctx, streams, p, stats, nil)
}

// errCtrlCBeforeInput is openInput's error when Ctrl-C came before the
// capture did (interruptedBeforeInput says how the run ends).
var errCtrlCBeforeInput = errors.New("interrupted before the capture came")

// openInput opens the capture to read: stdin for "-", else o.file, waited
// for with --follow (as tail -F does) and followed as it grows, or read
// with a progress bar when it is large and stderr a terminal. closeInput
// ends the progress bar and closes the file, once the run is over. The
// error is errCtrlCBeforeInput, or an exitError.
func (o *pcapOptions) openInput(ctx context.Context, streams IOStreams) (in io.Reader, closeInput func(), err error) {
	// A pipe's writer may keep it open after Ctrl-C: stdin is read in the
	// background so that the read waiting on it ends with the context.
	in, closeInput = &interruptible{ctx: ctx, r: streams.In}, func() {}
	if o.file == "-" {
		return in, closeInput, nil
	}
	if _, err := os.Stat(o.file); o.follow && errors.Is(err, fs.ErrNotExist) {
		// kwatch pcap --follow started before tcpdump -w: wait, as
		// tail -F does.
		fmt.Fprintf(streams.ErrOut, "kwatch: %s does not exist yet; waiting for it to appear (tcpdump -w %s)\n", o.file, o.file)
		if err := pcap.WaitForFile(ctx, o.file); err != nil {
			if ctx.Err() != nil {
				return nil, nil, errCtrlCBeforeInput
			}
			return nil, nil, &exitError{code: ExitUsage, err: err}
		}
	}
	f, err := openInterruptibly(ctx, o.file)
	if err != nil {
		if ctx.Err() != nil { // Ctrl-C before a writer opened the pipe
			return nil, nil, errCtrlCBeforeInput
		}
		return nil, nil, &exitError{code: ExitUsage, err: err}
	}
	closeInput = func() { f.Close() }
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		f.Close()
		return nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("%s: is a directory; give a capture file", o.file)}
	}
	regular := err == nil && fi.Mode().IsRegular()
	in = f
	if err == nil && !regular {
		// A named pipe (mkfifo, <(tcpdump -w - …)) or a device
		// may wait for input as stdin does.
		in = &interruptible{ctx: ctx, r: f}
	}
	// A progress bar on stderr for a large file read on a terminal,
	// never for stdin (its size is unknown) or a pipe.
	if o.follow {
		in = pcap.Follow(ctx, in)
	} else if regular && fi.Size() >= progressMinBytes && streams.ErrTTY {
		bar := progressbar.NewOptions64(fi.Size(),
			progressbar.OptionSetWriter(streams.ErrOut),
			progressbar.OptionSetDescription("reading "+o.file),
			progressbar.OptionShowBytes(true),
			progressbar.OptionThrottle(100e6),
			progressbar.OptionClearOnFinish(),
		)
		r := progressbar.NewReader(f, bar)
		in = &r
		closeInput = func() {
			_ = bar.Finish()
			f.Close()
		}
	}
	return in, closeInput, nil
}

// keys reads the key log chosen by keylog.Choose (--tls-keylog, else
// SSLKEYLOGFILE) into a fresh keylog.Log, saying on stderr why one is not
// read; a --tls-keylog that cannot be used is an exitError.
func (o *pcapOptions) keys(streams IOStreams) (*keylog.Log, error) {
	keys := keylog.New()
	choice := keylog.Choose(o.tlsKeylog, getenv(streams, "SSLKEYLOGFILE"))
	// A client may be about to write the key log (kwatch pcap - from
	// tcpdump, or --follow): read when it appears.
	if p := keys.AddChoice(choice, keylog.ChoiceOptions{Live: o.live(), CaptureFormat: pcap.CaptureFormat}); p != nil {
		if p.Fatal {
			return nil, &exitError{code: ExitUsage, err: p}
		}
		fmt.Fprintf(streams.ErrOut, "kwatch: %v\n", p)
	}
	return keys, nil
}

// end ends a run after pcap.Read returned stats and err: it closes the
// output, writes the report, and returns the exit error (nil for exit 0):
// Ctrl-C before the capture's header, an unusable capture, output that
// could not be written, Ctrl-C without --follow, or problems reported.
func (o *pcapOptions) end(ctx context.Context, streams IOStreams, p printer.Printer, stats *pcap.Stats, err error) error {
	if err != nil && ctx.Err() != nil {
		// Ctrl-C before the capture's header was read.
		_ = p.Close()
		return o.interruptedBeforeInput()
	}
	if err != nil {
		_ = p.Close() // show what was decoded before the error
		_ = o.output.writeReport()
		return &exitError{code: ExitUsage, err: fmt.Errorf("%s: %w", o.file, err)}
	}
	closeErr := p.Close()
	// The report does not depend on stdout: written even when it failed.
	if err := o.output.writeReport(); err != nil {
		return err
	}
	if closeErr != nil {
		return &exitError{code: ExitUsage, err: fmt.Errorf("writing output: %w", closeErr)}
	}
	if ctx.Err() != nil && !o.follow && o.iface == "" {
		return &exitError{code: ExitInterrupted}
	}
	opt := o.readOptions(nil)
	if msg := stats.Unmatched(opt); msg != "" {
		fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", msg)
		return &exitError{code: ExitNothing}
	}
	if st := o.output.stage; st != nil && p.Tally().Watches == 0 {
		if msg := st.Unmatched(); msg != "" {
			fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", msg)
			return &exitError{code: ExitNothing}
		}
	}
	if msg := p.Tally().NothingDecoded(stats.Connections, o.nothingFrom()); msg != "" {
		fmt.Fprintf(streams.ErrOut, "kwatch: %s\n", msg)
		return &exitError{code: ExitNothing}
	}
	if t := p.Tally(); t.Problems+t.Warnings > 0 {
		return problemsSeen
	}
	return nil
}

// nothingFrom names the source of the run's connections for
// Tally.NothingDecoded: a capture's, or kwatch attach's processes' (with
// how many connections they had open at attach, when known).
func (o *pcapOptions) nothingFrom() printer.NothingFrom {
	if !o.attached {
		return printer.FromCapture
	}
	from := printer.FromAttach
	if o.openAtAttach > 0 {
		// They had connections: none carried a packet since.
		from.None = fmt.Sprintf("the processes' %s open at attach carried no packet since, and they made or took no other",
			phrase.Count(o.openAtAttach, "TCP connection", "TCP connections"))
	}
	return from
}

// interruptedBeforeInput is how a run ends when Ctrl-C came before the
// capture did: nothing to show; 130, or 0 with --follow, where Ctrl-C is
// how a run ends.
func (o *pcapOptions) interruptedBeforeInput() error {
	if o.follow {
		return nil
	}
	return &exitError{code: ExitInterrupted}
}

// openInterruptibly opens path for reading. Opening a named pipe waits
// for a writer (mkfifo p; kwatch pcap p; tcpdump -w p later), so that is
// done on a goroutine of its own, and ctx's end (Ctrl-C, SIGTERM) ends the
// wait with ctx's error; the goroutine then stays blocked until the
// process exits.
func openInterruptibly(ctx context.Context, path string) (*os.File, error) {
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return os.Open(path)
	}
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		done <- opened{f, err}
	}()
	select {
	case o := <-done:
		return o.f, o.err
	case <-ctx.Done():
		go func() { // close the pipe if a writer comes after all
			if o := <-done; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// interruptible reads r in a goroutine of its own, so that a Read waiting
// for input returns ctx's error once ctx is done (Ctrl-C) instead of
// waiting on; the goroutine may stay blocked until the process exits.
type interruptible struct {
	ctx     context.Context
	r       io.Reader
	started bool
	results chan readResult
	rest    []byte // of the last result, not yet returned
	err     error  // the reader's error, once its data is returned
}

type readResult struct {
	data []byte
	err  error
}

// Read returns bytes read from r, or ctx's error when ctx is done first.
func (in *interruptible) Read(p []byte) (int, error) {
	if !in.started {
		in.started = true
		in.results = make(chan readResult, 1)
		go func() {
			for {
				buf := make([]byte, 64<<10)
				n, err := in.r.Read(buf)
				in.results <- readResult{buf[:n], err}
				if err != nil {
					return
				}
			}
		}()
	}
	for len(in.rest) == 0 && in.err == nil {
		select {
		case res := <-in.results:
			in.rest, in.err = res.data, res.err
		case <-in.ctx.Done():
			return 0, in.ctx.Err()
		}
	}
	if len(in.rest) > 0 {
		n := copy(p, in.rest)
		in.rest = in.rest[n:]
		return n, nil
	}
	return 0, in.err
}
