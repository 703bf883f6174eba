package top

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
)

// ScreenOptions say where and how the table is shown.
type ScreenOptions struct {
	// Out is where the table goes (stdout); ErrOut where kwatch says why
	// it could not be shown (stderr). In is where the keys come from;
	// nil: the terminal's (stdin when it is one, else /dev/tty, as
	// Bubble Tea opens it).
	Out, ErrOut io.Writer
	In          io.Reader
	// Terminal says that Out is a terminal: the table is drawn in its
	// alternate screen, redrawn every Interval, sorted by the keys the
	// footer lists, until q or Ctrl-C; the screen is then restored.
	// Otherwise a plain table (no escape sequence) is written every
	// Interval, and once more at the end.
	Terminal bool
	// Color enables colors and attributes on a terminal, decided once by
	// the caller (--color, NO_COLOR, TERM=dumb).
	Color bool
	// Interval is the time between refreshes; 0: one second.
	Interval time.Duration
	// Quit is called when the reader quits the table (q, Ctrl-C): it
	// ends the run.
	Quit func()
	// Now reads the clock; nil: time.Now.
	Now func() time.Time
}

// tickMsg asks the screen to refresh.
type tickMsg time.Time

// screen is the model Bubble Tea runs: the table's model, refreshed at
// each tick.
type screen struct{ m *model }

// Init refreshes at once and starts the ticks.
func (s screen) Init() tea.Cmd {
	s.m.refresh()
	return s.tick()
}

func (s screen) tick() tea.Cmd {
	return tea.Tick(s.m.interval, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// Update applies a tick, a key or a new size.
func (s screen) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tickMsg:
		s.m.refresh()
		return s, s.tick()
	case tea.KeyPressMsg:
		if s.m.key(msg.String()) {
			if s.m.quit != nil {
				s.m.quit()
			}
			return s, tea.Quit
		}
	case tea.WindowSizeMsg:
		s.m.width, s.m.height = msg.Width, msg.Height
		s.m.clampOffset()
	}
	return s, nil
}

// View draws the table in the alternate screen.
func (s screen) View() tea.View {
	v := tea.NewView(trimLines(s.m.render(true)))
	v.AltScreen = true
	return v
}

// Show shows the table until ctx is done or the reader quits, and returns
// once the terminal is as it was. On a terminal whose input cannot be
// read, or when Bubble Tea cannot start, it writes the plain table
// instead.
func (t *Table) Show(ctx context.Context, opt ScreenOptions) error {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	m := newModel(t.Snapshot, opt.Now, opt.Color && opt.Terminal)
	if opt.Interval > 0 {
		m.interval = opt.Interval
	}
	m.quit = opt.Quit
	if !opt.Terminal {
		return plain(ctx, m, opt.Out)
	}
	profile := colorprofile.Ascii
	if opt.Color {
		profile = colorprofile.ANSI
	}
	popt := []tea.ProgramOption{tea.WithOutput(opt.Out), tea.WithColorProfile(profile),
		// main's context takes SIGINT and SIGTERM; in raw mode Ctrl-C is
		// a key.
		tea.WithoutSignalHandler()}
	if opt.In != nil {
		popt = append(popt, tea.WithInput(opt.In))
	}
	p := tea.NewProgram(screen{m}, popt...)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			p.Quit()
		case <-done:
		}
	}()
	if _, err := p.Run(); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintf(opt.ErrOut, "kwatch: the table cannot be shown on this terminal (%v): a plain table every %s instead\n", err, m.interval)
		return plain(ctx, m, opt.Out)
	}
	return nil
}

// plain writes the table every interval, and once more when ctx is done.
func plain(ctx context.Context, m *model, out io.Writer) error {
	tk := time.NewTicker(m.interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			m.refresh()
			_, err := io.WriteString(out, plainText(m))
			return err
		case <-tk.C:
			m.refresh()
			if _, err := io.WriteString(out, plainText(m)); err != nil {
				return err
			}
		}
	}
}

// plainText is the table as plain text, and a blank line after it.
func plainText(m *model) string {
	return trimLines(ansi.Strip(m.render(false))) + "\n"
}

// trimLines drops the spaces that end the lines of s (the table's padding).
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// MaxHeld bounds the output a Gate holds, in bytes; past it the rest is
// dropped and counted.
const MaxHeld = 16 << 20

// Gate is the writer of the output the table stands in for (the printer's
// lines): it drops what is written while the table is shown, holds what is
// written once the run ends (Hold: its health lines and summary), and on
// Release writes what it held, then everything after as it comes. It is
// safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	w       io.Writer
	state   int // gateDrop, gateHold, gateOpen
	held    bytes.Buffer
	dropped int64
}

const (
	gateDrop = iota
	gateHold
	gateOpen
)

// NewGate returns a Gate in front of w, dropping what is written.
func NewGate(w io.Writer) *Gate { return &Gate{w: w} }

// Write drops, holds or writes p.
func (g *Gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case gateOpen:
		return g.w.Write(p)
	case gateHold:
		if g.held.Len()+len(p) <= MaxHeld {
			g.held.Write(p)
		} else {
			g.dropped += int64(len(p))
		}
	}
	return len(p), nil
}

// Hold holds what is written from now on, until Release.
func (g *Gate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == gateDrop {
		g.state = gateHold
	}
}

// Release writes what was held (and says how much was dropped past
// MaxHeld), then lets everything through.
func (g *Gate) Release() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == gateOpen {
		return nil
	}
	g.state = gateOpen
	_, err := g.w.Write(g.held.Bytes())
	if err == nil && g.dropped > 0 {
		_, err = fmt.Fprintf(g.w, "kwatch: %d bytes of the run's end not shown (more than %d held while the table was shown)\n", g.dropped, MaxHeld)
	}
	g.held = bytes.Buffer{}
	return err
}
