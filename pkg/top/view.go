package top

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"charm.land/lipgloss/v2/table"
	"github.com/charmbracelet/x/ansi"

	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/printer"
)

// RateWindow is the time events/s and bytes/s are measured over: the rows'
// counts a refresh saw this long ago (at most) against the latest.
const RateWindow = 5 * time.Second

// sortKey is a column the rows are sorted by.
type sortKey int

// The sort keys, in the footer's order.
const (
	byRate sortKey = iota
	byEvents
	byBytes
	byLast
	byRestarts
	byStalls
	byHealth
	byClient
	byResource
	byNamespace
	byWatch
)

// sortKeys are the keys a reader presses to sort by a column, as the
// footer lists them.
var sortKeys = []struct {
	key  string
	by   sortKey
	name string
}{
	{"s", byRate, "ev/s"}, {"e", byEvents, "events"}, {"b", byBytes, "bytes/s"}, {"l", byLast, "last"},
	{"t", byRestarts, "restarts"}, {"x", byStalls, "stalls"}, {"h", byHealth, "health"},
	{"c", byClient, "client"}, {"r", byResource, "resource"}, {"n", byNamespace, "namespace"}, {"w", byWatch, "watch"},
}

// columns of the table; sorted names the column a sort key marks.
var columns = []struct {
	title  string
	by     sortKey
	right  bool // numbers, aligned right
	sorted bool // has a sort key
}{
	{"WATCH", byWatch, false, true}, {"CLIENT", byClient, false, true}, {"RESOURCE", byResource, false, true},
	{"NAMESPACE", byNamespace, false, true}, {"SELECTORS", 0, false, false}, {"EVENTS", byEvents, true, true},
	{"EV/S", byRate, true, true}, {"B/S", byBytes, true, true}, {"LAST", byLast, true, true},
	{"RESTARTS", byRestarts, true, true}, {"RELISTS", 0, true, false}, {"STALLS", byStalls, true, true},
	{"HEALTH", byHealth, false, true},
}

// The columns styled on their own.
const (
	colStalls = 11
	colHealth = 12
)

// sample is a row's counts at one refresh.
type sample struct {
	at     time.Time
	events int
	bytes  int64
}

// viewRow is a Row with its rates.
type viewRow struct {
	Row
	rate, byteRate float64
	age            time.Duration // since its last event; -1 before the first
}

// model is what the screen shows: the rows of the latest refresh, sorted,
// and the reader's choices. It is Bubble Tea's model on a terminal and the
// plain table's on a pipe; it draws with no terminal (render), so that
// tests read it as text.
type model struct {
	src      func() Snapshot
	now      func() time.Time
	interval time.Duration
	rows     []viewRow
	notShown int
	notice   string
	hist     map[int][]sample
	// refreshed is the time of the last refresh (zero before the first):
	// a row first seen after it had no event then.
	refreshed time.Time
	by        sortKey
	reverse   bool
	offset    int
	width     int
	height    int
	styles    styles
	// natural is each column's widest text so far, its header's at
	// least (display cells): the columns grow, and never shrink while
	// the run goes on (measure).
	natural []int
	// quit is called when the reader quits (q, Ctrl-C): it ends the run.
	quit func()
}

func newModel(src func() Snapshot, now func() time.Time, color bool) *model {
	return &model{src: src, now: now, interval: time.Second, hist: map[int][]sample{}, by: byRate, styles: newStyles(color)}
}

// refresh takes the rows from the table and measures their rates.
func (m *model) refresh() {
	s := m.src()
	now := m.now()
	m.notShown, m.notice = s.NotShown, s.Notice
	m.rows = m.rows[:0]
	seen := make(map[int]bool, len(s.Rows))
	for _, r := range s.Rows {
		seen[r.ID] = true
		h := m.hist[r.ID]
		if h == nil && !m.refreshed.IsZero() {
			h = append(h, sample{at: m.refreshed})
		}
		h = append(h, sample{now, r.Events, r.Bytes})
		// Keep the samples within the window, and the one before it.
		for len(h) > 2 && now.Sub(h[1].at) >= RateWindow {
			h = h[1:]
		}
		m.hist[r.ID] = h
		v := viewRow{Row: r, age: -1}
		if first := h[0]; len(h) > 1 {
			if d := now.Sub(first.at).Seconds(); d > 0 {
				v.rate = float64(r.Events-first.events) / d
				v.byteRate = float64(r.Bytes-first.bytes) / d
			}
		}
		if !r.Last.IsZero() {
			v.age = max(now.Sub(r.Last), 0)
		}
		m.rows = append(m.rows, v)
	}
	for id := range m.hist {
		if !seen[id] {
			delete(m.hist, id)
		}
	}
	m.refreshed = now
	m.sort()
}

// sort orders the rows by the sort key: counts, rates, time since the last
// event (the longest first: a quiet watch is what to look at), restarts,
// stalls and health (bad first) from the most; names from A; the rows'
// first appearance breaks ties. reverse turns it around.
func (m *model) sort() {
	slices.SortStableFunc(m.rows, func(a, b viewRow) int {
		c := m.compare(a, b)
		if c == 0 {
			c = a.ID - b.ID
		} else if m.reverse {
			c = -c
		}
		return c
	})
}

func (m *model) compare(a, b viewRow) int {
	switch m.by {
	case byRate:
		return cmp.Compare(b.rate, a.rate)
	case byEvents:
		return b.Events - a.Events
	case byBytes:
		return cmp.Compare(b.byteRate, a.byteRate)
	case byLast:
		age := func(r viewRow) time.Duration {
			if r.age < 0 {
				return 1<<63 - 1 // no event yet: quiet the longest
			}
			return r.age
		}
		return cmp.Compare(age(b), age(a))
	case byRestarts:
		return cmp.Or(b.Restarts-a.Restarts, b.Relists-a.Relists)
	case byStalls:
		return (b.ZeroWindows + b.FlowStalls) - (a.ZeroWindows + a.FlowStalls)
	case byHealth:
		if a.Bad != b.Bad {
			if a.Bad {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Health, b.Health)
	case byClient:
		return strings.Compare(a.Client, b.Client)
	case byResource:
		return strings.Compare(a.Resource, b.Resource)
	case byNamespace:
		// A namespace not seen after those seen.
		notSeen := func(r viewRow) int {
			if r.Namespace == NamespaceNotSeen {
				return 1
			}
			return 0
		}
		return cmp.Or(notSeen(a)-notSeen(b), strings.Compare(a.Namespace, b.Namespace))
	}
	return 0 // byWatch: first appearance
}

// key applies a key the reader pressed; it reports whether the key quits.
func (m *model) key(k string) (quit bool) {
	switch k {
	case "q", "ctrl+c":
		return true
	case "R":
		m.reverse = !m.reverse
	case "up", "k":
		m.offset--
	case "down", "j":
		m.offset++
	case "pgup":
		m.offset -= max(m.visible(), 1)
	case "pgdown", "space":
		m.offset += max(m.visible(), 1)
	case "home", "g":
		m.offset = 0
	case "end", "G":
		m.offset = len(m.rows)
	default:
		for _, s := range sortKeys {
			if s.key == k {
				m.by, m.reverse, m.offset = s.by, false, 0
			}
		}
	}
	m.sort()
	m.clampOffset()
	return false
}

// visible is how many rows fit under the header and above the footer; all
// of them when the height is not known (a pipe).
func (m *model) visible() int {
	if m.height <= 0 {
		return len(m.rows)
	}
	return max(m.height-5, 1) // title, header, its rule, notice, footer
}

func (m *model) clampOffset() {
	m.offset = max(min(m.offset, len(m.rows)-m.visible()), 0)
}

// render draws the screen: a title line, the table, the notice and the
// footer with the keys (on a terminal), as text styled by m.styles.
func (m *model) render(terminal bool) string {
	st := m.styles
	var b strings.Builder
	total := 0.0
	for _, r := range m.rows {
		total += r.rate
	}
	title := fmt.Sprintf("%s · %s events/s · sorted by %s", phrase.Count(len(m.rows), "watch", "watches"), rate(total), m.sortName())
	if m.notShown > 0 {
		title += fmt.Sprintf(" · %d more watches not shown", m.notShown)
	}
	if terminal {
		title = "kwatch top · " + title + " · " + m.now().Format("15:04:05")
	} else {
		// On a pipe, each table starts with its time, as kwatch's
		// lines do there (RFC 3339, UTC).
		title = m.now().UTC().Format(time.RFC3339) + " " + title
	}
	b.WriteString(st.title.Render(title))
	b.WriteByte('\n')
	t := table.New().BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderColumn(false).BorderHeader(terminal).Border(lipgloss.NormalBorder()).BorderStyle(st.rule).Wrap(false)
	rows := m.rows
	if terminal {
		m.clampOffset()
		rows = rows[m.offset:min(m.offset+m.visible(), len(rows))]
	}
	width := 0
	if terminal {
		width = m.width
	}
	m.measure()
	l := m.layout(width)
	headers := make([]string, len(l.cols))
	for j, i := range l.cols {
		h := columns[i].title
		if columns[i].sorted && columns[i].by == m.by {
			h += m.arrow()
		}
		headers[j] = cell(h, l.widths[i], columns[i].right)
	}
	t.Headers(headers...)
	for _, r := range rows {
		c := cells(r)
		shown := make([]string, len(l.cols))
		for j, i := range l.cols {
			shown[j] = cell(c[i], l.widths[i], columns[i].right)
		}
		t.Row(shown...)
	}
	t.StyleFunc(func(row, j int) lipgloss.Style {
		s := st.cell
		col := l.cols[j]
		if j == len(l.cols)-1 {
			s = s.PaddingRight(0)
		}
		if row == table.HeaderRow {
			if columns[col].sorted && columns[col].by == m.by {
				return s.Inherit(st.sorted)
			}
			return s.Inherit(st.header)
		}
		r := rows[row]
		switch {
		case r.Bad && col == colHealth:
			s = s.Inherit(st.bad)
		case col == colStalls && r.ZeroWindows+r.FlowStalls > 0:
			s = s.Inherit(st.warn)
		case r.Ended:
			s = s.Inherit(st.ended)
		}
		return s
	})
	tab := t.String()
	if terminal && m.width > 0 {
		lines := strings.Split(tab, "\n")
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, m.width, "")
		}
		tab = strings.Join(lines, "\n")
	}
	b.WriteString(tab)
	b.WriteByte('\n')
	if !terminal {
		return b.String()
	}
	var status []string
	if m.offset > 0 || m.offset+len(rows) < len(m.rows) {
		status = append(status, fmt.Sprintf("rows %d-%d of %d", m.offset+1, m.offset+len(rows), len(m.rows)))
	}
	if len(l.hidden) > 0 {
		names := make([]string, len(l.hidden))
		for j, i := range l.hidden {
			names[j] = columns[i].title
		}
		status = append(status, "hidden (too narrow): "+strings.Join(names, " "))
	}
	if m.notice != "" {
		status = append(status, "kwatch: "+printer.Escape(m.notice))
	}
	if line := strings.Join(status, " · "); line != "" {
		if m.width > 0 {
			line = ansi.Truncate(line, m.width, "…")
		}
		b.WriteString(st.footer.Render(line))
	}
	b.WriteByte('\n')
	var keys []string
	for _, s := range sortKeys {
		keys = append(keys, s.key+" "+s.name)
	}
	footer := "sort: " + strings.Join(keys, " · ") + " · R reverse · ↑↓ scroll · q quit"
	if m.width > 0 {
		footer = ansi.Truncate(footer, m.width, "…")
	}
	b.WriteString(st.footer.Render(footer))
	return b.String()
}

func (m *model) sortName() string {
	for _, s := range sortKeys {
		if s.by == m.by {
			if m.reverse {
				return s.name + " (reversed)"
			}
			return s.name
		}
	}
	return ""
}

// arrow marks the sorted column's header: ▼ from the most (or A), ▲
// reversed.
func (m *model) arrow() string {
	if m.reverse {
		return "▲"
	}
	return "▼"
}

// priority lists the columns in the order a narrow terminal keeps them
// (the sort key's column always first): what a watch is and how fast it
// goes before its counts, its health and its selectors.
var priority = []int{0, 1, 2, 6, 7, 3, 5, 12, 8, 9, 11, 4, 10} // WATCH, CLIENT, RESOURCE, EV/S, B/S, NAMESPACE, EVENTS, HEALTH, LAST, RESTARTS, STALLS, SELECTORS, RELISTS

// least is the width (display cells) a text column is cut down to, at
// most, to make room for more columns ("…" ends what is cut); 0 for the
// numbers, which are never cut.
var least = []int{10, 18, 14, 10, 10, 0, 0, 0, 0, 0, 0, 0, 8}

// comfortable is the width (display cells) a text column is given before
// any is given more, when the terminal is wide enough for the columns
// kept but not for all of their text: most clients' names, resources and
// namespaces read whole.
var comfortable = []int{12, 40, 24, 20, 20, 0, 0, 0, 0, 0, 0, 0, 24}

// layout is the columns shown and their widths (display cells, without
// the 2 cells between columns).
type layout struct {
	cols   []int // indexes into columns, in the table's order
	widths []int // by index into columns
	hidden []int // the columns left out, in the table's order
}

// layout chooses the columns shown and their widths from m.natural (each
// column's widest text so far: widths grow as wider text comes, and never
// shrink while the run goes on) and the terminal's width (none on a
// pipe): in priority's order, the sort key's column first, each column
// that fits at its least width is kept; what is left of the width is then
// given to the text columns kept, in the same order, up to their
// comfortable width, then up to their natural width.
func (m *model) layout(width int) layout {
	l := layout{widths: slices.Clone(m.natural)}
	keep := make([]bool, len(columns))
	if width <= 0 {
		for i := range columns {
			l.cols = append(l.cols, i)
		}
		return l
	}
	order := make([]int, 0, len(columns))
	for i, c := range columns {
		if c.sorted && c.by == m.by {
			order = append(order, i)
		}
	}
	for _, i := range priority {
		if !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	narrow := func(i int) int {
		if least[i] == 0 {
			return m.natural[i]
		}
		return max(min(least[i], m.natural[i]), headerWidth(i))
	}
	used := -2
	for _, i := range order {
		if w := narrow(i); used+2+w <= width || used < 0 {
			keep[i], l.widths[i] = true, w
			used += 2 + w
		}
	}
	for _, upTo := range []func(i int) int{
		func(i int) int { return min(m.natural[i], max(comfortable[i], l.widths[i])) },
		func(i int) int { return m.natural[i] },
	} {
		for _, i := range order {
			if keep[i] {
				add := max(min(upTo(i)-l.widths[i], width-used), 0)
				l.widths[i] += add
				used += add
			}
		}
	}
	for i := range columns {
		if keep[i] {
			l.cols = append(l.cols, i)
		} else {
			l.hidden = append(l.hidden, i)
		}
	}
	return l
}

// headerWidth is the width of column i's header, with room for the arrow
// that marks the sorted column.
func headerWidth(i int) int {
	w := ansi.StringWidth(columns[i].title)
	if columns[i].sorted {
		w++
	}
	return w
}

// measure widens m.natural to the cells of the rows (display cells).
func (m *model) measure() {
	if m.natural == nil {
		m.natural = make([]int, len(columns))
		for i := range columns {
			m.natural[i] = headerWidth(i)
		}
	}
	for _, r := range m.rows {
		for i, c := range cells(r) {
			m.natural[i] = max(m.natural[i], ansi.StringWidth(c))
		}
	}
}

// cell cuts text to width display cells (with "…") and pads it to them,
// on the left for a column of numbers: every column keeps its width from
// one refresh to the next.
func cell(text string, width int, right bool) string {
	if ansi.StringWidth(text) > width {
		text = ansi.Truncate(text, width, "…")
	}
	pad := strings.Repeat(" ", max(width-ansi.StringWidth(text), 0))
	if right {
		return pad + text
	}
	return text + pad
}

// cells are a row's cells, as text safe for a terminal (bytes from the
// wire escaped).
func cells(r viewRow) []string {
	last := "-"
	if r.age >= 0 {
		last = ago(r.age)
	}
	stalls := "0"
	if n := r.ZeroWindows + r.FlowStalls; n > 0 {
		var parts []string
		if r.ZeroWindows > 0 {
			parts = append(parts, strconv.Itoa(r.ZeroWindows)+" zw")
		}
		if r.FlowStalls > 0 {
			parts = append(parts, strconv.Itoa(r.FlowStalls)+" fc")
		}
		stalls = strings.Join(parts, " ")
	}
	return []string{r.Watch, printer.Escape(r.Client), printer.Escape(r.Resource), printer.Escape(r.Namespace), printer.Escape(r.Selectors),
		strconv.Itoa(r.Events), rate(r.rate), bytesRate(r.byteRate), last, strconv.Itoa(r.Restarts), strconv.Itoa(r.Relists),
		stalls, printer.Escape(r.Health)}
}

// rate formats a rate per second: "0", "0.4", "12", "1.2k".
func rate(v float64) string {
	switch {
	case v <= 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v < 1e6:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
}

// bytesRate formats bytes per second in binary units: "0", "512", "1.5Ki", "3.2Mi".
func bytesRate(v float64) string {
	switch {
	case v <= 0:
		return "0"
	case v < 1024:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v < 1<<20:
		return strconv.FormatFloat(v/1024, 'f', 1, 64) + "Ki"
	}
	return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + "Mi"
}

// ago formats a time since: "0s", "42s", "3m", "5h", "2d".
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// styles are the screen's styles: colors and attributes when color is on,
// none at all when it is off (--color never, NO_COLOR, TERM=dumb, or a
// pipe).
type styles struct {
	title, header, sorted, rule, cell, bad, warn, ended, footer lipgloss.Style
}

func newStyles(color bool) styles {
	cell := lipgloss.NewStyle().PaddingRight(2)
	if !color {
		return styles{cell: cell}
	}
	return styles{
		title:  lipgloss.NewStyle().Bold(true),
		header: lipgloss.NewStyle().Bold(true),
		sorted: lipgloss.NewStyle().Bold(true).Underline(true).UnderlineSpaces(false),
		rule:   lipgloss.NewStyle().Faint(true),
		cell:   cell,
		bad:    lipgloss.NewStyle().Foreground(lipgloss.Red).Bold(true),
		warn:   lipgloss.NewStyle().Foreground(lipgloss.Yellow),
		ended:  lipgloss.NewStyle().Faint(true),
		footer: lipgloss.NewStyle().Faint(true),
	}
}
