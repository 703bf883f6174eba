package cmd

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kwatch/kwatch/pkg/diff"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/filter"
	"github.com/kwatch/kwatch/pkg/health"
	"github.com/kwatch/kwatch/pkg/inflate"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/report"
	"github.com/kwatch/kwatch/pkg/rewatch"
	"github.com/kwatch/kwatch/pkg/top"
)

// outputOptions are the output flags shared by kwatch pcap and kwatch stream.
type outputOptions struct {
	Output        string
	Color         string
	Wire          bool
	Frames        bool
	ShowSecrets   bool
	MaxEventBytes int64
	// MaxInflatedBytes bounds one gzip member's inflated bytes.
	MaxInflatedBytes int64
	Diff             bool
	DiffAll          bool
	// Report is the --report file; report collects it once sink made it.
	Report      string
	ReportTitle string
	report      *report.Report
	// Bookmarks is --bookmarks: each BOOKMARK on its own line.
	Bookmarks bool
	// Filter is what kwatch pcap and attach show (--user-agent,
	// --resource, -n); stage drops the rest once sink made it.
	Filter filter.Options
	stage  *filter.Stage
	// Top is --top (kwatch attach, kwatch pcap -i and --follow): the
	// live table stands in for the lines; table is it once sink made it,
	// and gate the writer in front of stdout that drops the printer's
	// lines meanwhile and holds the run's end until the table is gone.
	Top   bool
	table *top.Table
	gate  *top.Gate
}

func (o *outputOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Output, "output", "o", "pretty", "output format: pretty or json (JSON Lines)")
	fs.StringVar(&o.Color, "color", "auto", "color output: auto, always or never (auto: only on a terminal, not when NO_COLOR is set or TERM=dumb)")
	fs.BoolVar(&o.Wire, "wire", false, "show the framing bytes of each chunk in hex (e.g. 33 61 61 0d 0a for \"3aa\\r\\n\")")
	fs.BoolVar(&o.Frames, "frames", false, "list every HTTP/2 frame of both directions (type, stream, length, flags, offset): the HTTP/2 counterpart of --wire")
	fs.BoolVar(&o.ShowSecrets, "show-secrets", false, "show the data of Secrets instead of REDACTED")
	fs.BoolVar(&o.Diff, "diff", false, "show what changed in each MODIFIED and DELETED event against the object's previous version (JSON: an RFC 7386 merge patch in \"diff\")")
	fs.BoolVar(&o.DiffAll, "diff-all", false, "with --diff, also show metadata.managedFields, resourceVersion and generation")
	fs.BoolVar(&o.Bookmarks, "bookmarks", false, "show each BOOKMARK event on a line of its own (by default a watch's bookmarks are said in one line per 5 minutes, \"12 BOOKMARKs rv 2351→2410 over 4m58s\"; -o json has each)")
	fs.StringVar(&o.Report, "report", "", "also write an HTML report to this file at the end (and on Ctrl-C): a timeline of every watch, the bytes of every event, who watches what, health; one self-contained file")
	fs.Var(newByteSize(&o.MaxEventBytes, event.DefaultMaxEventBytes, math.MaxInt64), "max-event-bytes", "largest watch event decoded, in bytes or as a quantity (e.g. 64Mi); larger ones are reported and skipped")
	fs.Var(newByteSize(&o.MaxInflatedBytes, inflate.DefaultMaxMemberBytes, math.MaxInt64), "max-inflated-bytes", "most bytes one gzip member of a compressed body may inflate to (e.g. 256Mi); past it the member is reported as a gzip bomb and skipped")
}

func (o *outputOptions) validate() error {
	switch o.Output {
	case "pretty", "json":
	default:
		return fmt.Errorf("--output must be pretty or json, not %q", o.Output)
	}
	if o.Report != "" {
		if !strings.HasSuffix(strings.ToLower(o.Report), ".html") && !strings.HasSuffix(strings.ToLower(o.Report), ".htm") {
			return fmt.Errorf("--report writes HTML: name the file FILE.html, not %q", o.Report)
		}
		// Said now rather than after a long capture.
		if fi, err := os.Stat(filepath.Dir(o.Report)); err != nil {
			return fmt.Errorf("--report %s: the directory %s does not exist", o.Report, filepath.Dir(o.Report))
		} else if !fi.IsDir() {
			return fmt.Errorf("--report %s: %s is not a directory", o.Report, filepath.Dir(o.Report))
		}
		if fi, err := os.Stat(o.Report); err == nil && fi.IsDir() {
			return fmt.Errorf("--report %s is a directory; name the report file, e.g. %s", o.Report, filepath.Join(o.Report, "report.html"))
		}
		f, err := os.CreateTemp(filepath.Dir(o.Report), ".kwatch-report-*.html")
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return fmt.Errorf("--report %s: cannot write in %s (%v)", o.Report, filepath.Dir(o.Report), err)
		}
		f.Close()
		os.Remove(f.Name())
	}
	switch o.Color {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("--color must be auto, always or never, not %q", o.Color)
	}
	if o.Top && o.Output == "json" {
		return fmt.Errorf("--top shows a table of the watches, -o json writes their records: choose one")
	}
	if o.MaxInflatedBytes <= 0 {
		return fmt.Errorf("--max-inflated-bytes must be positive")
	}
	if o.MaxEventBytes <= 0 {
		return fmt.Errorf("--max-event-bytes must be positive")
	}
	return nil
}

// useColor decides once whether to color output: --color always/never win;
// auto colors only a terminal, and not with NO_COLOR set or TERM=dumb
// (https://no-color.org).
func useColor(mode string, streams IOStreams) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if streams.Getenv != nil {
		if streams.Getenv("NO_COLOR") != "" || strings.EqualFold(streams.Getenv("TERM"), "dumb") {
			return false
		}
	}
	return streams.OutTTY
}

// sink wraps the printer in the record stages the flags ask for: first
// the filters (--user-agent, --resource, -n: pkg/filter), so that every
// stage after them, --top's table included, sees what they keep only;
// the watches of each client linked (pkg/rewatch, captures only), --diff,
// then the watch health that is always printed, and --top's table after
// it (it shows health's judgment of each watch). perConn is set for
// captures: it links the watches of each client, and keeps --diff's
// versions apart per watch.
func (o *outputOptions) sink(p printer.Printer, perConn bool) record.Sink {
	var next record.Sink = p
	if o.Report != "" {
		// The report sees what the printer sees, health records too.
		o.report = report.New(p, report.Options{Title: o.ReportTitle})
		next = o.report
	}
	if o.Top {
		o.table = top.New(next, top.Options{OnEnd: o.gate.Hold})
		next = o.table
	}
	h := health.New(next)
	if o.table != nil {
		o.table.SetHealth(h)
	}
	var s record.Sink = h
	if o.Diff || o.DiffAll {
		// After rewatch: a capture's versions are kept per watch, and
		// a watch that follows another (rewatch's Restart) diffs
		// against what that one delivered.
		s = diff.New(s, diff.Options{All: o.DiffAll, PerWatch: perConn})
	}
	if perConn {
		// A capture: its watches are linked by client, as kwatch
		// stream's own are by its loop.
		s = rewatch.New(s)
	}
	if o.Filter.Active() {
		// First: what it leaves out is not linked, diffed, judged nor
		// reported.
		o.stage = filter.New(s, o.Filter)
		s = o.stage
	}
	return s
}

// writeReport writes --report's file, when asked for, once the records
// have all been emitted.
func (o *outputOptions) writeReport() error {
	if o.report == nil {
		return nil
	}
	if err := o.report.WriteFile(o.Report); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is the temporary file's; name the report's
		}
		return &exitError{code: ExitUsage, err: fmt.Errorf("--report %s: %w", o.Report, err)}
	}
	return nil
}

func (o *outputOptions) printer(streams IOStreams, allHTTP bool) printer.Printer {
	return o.printerWith(streams, func(opt *printer.Options) { opt.AllHTTP = allHTTP })
}

// printerWith is printer with options a command adds (set).
func (o *outputOptions) printerWith(streams IOStreams, set func(*printer.Options)) printer.Printer {
	opt := printer.Options{Color: useColor(o.Color, streams), Wire: o.Wire, Terminal: streams.OutTTY, Bookmarks: o.Bookmarks,
		Filtered: o.Filter.Active()}
	set(&opt)
	out := streams.Out
	if o.Top {
		// The table stands in for the lines (sink).
		o.gate = top.NewGate(out)
		out = o.gate
	}
	if o.Output == "json" {
		return printer.NewJSON(out, opt)
	}
	return printer.NewPretty(out, opt)
}
