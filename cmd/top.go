package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/kwatch/kwatch/pkg/top"
)

// topHelp is --top's flag help, on kwatch attach and kwatch pcap.
const topHelp = "show a live table of the watches instead of their lines: client, resource, namespace and selectors, events, events/s, bytes/s, time since the last event, restarts and re-lists, stalls, health; refreshed every second, sorted by the keys its footer lists, q or Ctrl-C ends it with the usual summary (on a pipe: a plain table every second)"

// addTopFlag adds --top.
func (o *outputOptions) addTopFlag(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Top, "top", false, topHelp)
}

// topScreen is --top's table shown while a run goes on.
type topScreen struct {
	table  *top.Table
	gate   *top.Gate
	errOut io.Writer
	cancel context.CancelFunc
	done   chan struct{}
	// mu guards showing: notices go to the table while it is shown on
	// the terminal stderr writes to as well, to stderr otherwise.
	mu      sync.Mutex
	showing bool
}

// showTop shows the table of the records sink made (--top) until stop is
// called; quit ends the run (q or Ctrl-C on the table). It returns nil
// without --top.
func (o *outputOptions) showTop(ctx context.Context, streams IOStreams, quit func()) *topScreen {
	if o.table == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &topScreen{table: o.table, gate: o.gate, errOut: streams.ErrOut, cancel: cancel, done: make(chan struct{}),
		showing: streams.OutTTY && streams.ErrTTY}
	opt := top.ScreenOptions{Out: streams.Out, ErrOut: streams.ErrOut, Terminal: streams.OutTTY,
		Color: useColor(o.Color, streams), Quit: quit}
	if f, ok := streams.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		opt.In = f
	}
	go func() {
		defer close(s.done)
		if err := o.table.Show(ctx, opt); err != nil {
			fmt.Fprintf(streams.ErrOut, "kwatch: --top: %v\n", err)
		}
	}()
	return s
}

// notice says line on stderr, or keeps it for the table's footer (and for
// after it) while the table holds the terminal.
func (s *topScreen) notice(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.showing {
		s.table.Notice(line)
		return
	}
	fmt.Fprintf(s.errOut, "kwatch: %s\n", line)
}

// stop ends the table (its screen restored), says the notices it kept,
// then lets the output held meanwhile (the run's end: the problems the
// table held back, health and summary) through, and says how many
// problems were not listed.
func (s *topScreen) stop() {
	if s == nil {
		return
	}
	s.cancel()
	<-s.done
	s.mu.Lock()
	if s.showing {
		s.showing = false
		lines, more := s.table.Notices()
		for _, l := range lines {
			fmt.Fprintf(s.errOut, "kwatch: %s\n", l)
		}
		if more > 0 {
			fmt.Fprintf(s.errOut, "kwatch: %d more lines not kept while the table was shown\n", more)
		}
	}
	s.mu.Unlock()
	_ = s.gate.Release()
	if n := s.table.ProblemsNotKept(); n > 0 {
		fmt.Fprintf(s.errOut, "kwatch: %d more problems and warnings came while the table was shown and are not listed (the first %d are): run without --top to see each\n", n, top.MaxProblems)
	}
}
