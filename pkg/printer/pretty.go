package printer

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fatih/color"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// scheme holds the colors of the pretty printer, each enabled or disabled
// explicitly (fatih/color's global decides from os.Stdout alone).
type scheme struct {
	added, modified, deleted, bookmark, errorEv, unknown *color.Color
	conn, dim, problem, warning, header                  *color.Color
}

func newScheme(on bool) scheme {
	mk := func(attrs ...color.Attribute) *color.Color {
		c := color.New(attrs...)
		if on {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
		return c
	}
	return scheme{
		added:    mk(color.FgGreen),
		modified: mk(color.FgYellow),
		deleted:  mk(color.FgRed),
		bookmark: mk(color.FgCyan),
		errorEv:  mk(color.FgRed, color.Bold),
		unknown:  mk(color.FgMagenta),
		conn:     mk(color.FgBlue, color.Bold),
		dim:      mk(color.Faint),
		problem:  mk(color.FgRed, color.Bold),
		warning:  mk(color.FgYellow),
		header:   mk(color.Bold),
	}
}

func (s scheme) forType(t string) *color.Color {
	switch t {
	case "ADDED":
		return s.added
	case "MODIFIED":
		return s.modified
	case "DELETED":
		return s.deleted
	case "BOOKMARK":
		return s.bookmark
	case "ERROR":
		return s.errorEv
	}
	return s.unknown
}

// Pretty prints one readable line per watch event, with the connection's
// request and response before them and how the body ended after them.
type Pretty struct {
	filter
	w     *errWriter
	cs    scheme
	times timeText // the lines' times
	// quiet holds the labels of watches whose health has nothing to say
	// (no event, no finding), printed as one line before the run's.
	quiet []quietWatch
	// folds are the bookmarks held to be said in one line per watch
	// (Options.Bookmarks unset), by watch; swept is the time of the
	// record at which folds were last looked at for BookmarkFold.
	folds map[heldKey]*bookmarkFold
	swept time.Time
	// joined is the response of an HTTP/2 stream whose request was not
	// seen, held for the note that names its resource (holdJoined).
	joined *record.Response
	// joinedSaid is said as it was when joined was held: the client its
	// connection line named, not named again on the response's line.
	joinedSaid string
	// said is the client the connection line printed by this Emit named
	// ("" none): the watch request right after it does not name it again.
	said string
}

// BookmarkFold is the longest stretch of a watch's bookmarks the readable
// output says in one line: 5 minutes, the shortest watch client-go's
// reflector asks for (timeoutSeconds between 5 and 10 minutes:
// tools/cache/reflector.go's defaultMinWatchTimeout), in which
// kube-apiserver sends a bookmark about every minute (its watch cache's
// defaultBookmarkFrequency, and one 2 s before the watch's timeout): about
// five bookmarks a line, one or two lines for a client-go watch.
const BookmarkFold = 5 * time.Minute

// maxFolds bounds Pretty.folds: past it, bookmarks are shown one by one.
const maxFolds = 4096

// bookmarkFold is the bookmarks of one watch held to be said in one line.
type bookmarkFold struct {
	conn              *record.Conn
	exchange          int
	n                 int
	firstSeq, lastSeq int
	firstRV, lastRV   string
	first, last       time.Time
	// line is the first bookmark's own line, said when it stays alone.
	line string
}

// quietWatch is a watch's health line held back by printHealth.
type quietWatch struct{ label, text string }

// NewPretty returns a Pretty printer writing to w.
func NewPretty(w io.Writer, opt Options) *Pretty {
	times := newTimeText("2006-01-02T15:04:05.000000Z07:00", false)
	if opt.Terminal {
		times = newTimeText("15:04:05.000000", true)
	}
	return &Pretty{filter: newFilter(opt), w: &errWriter{w: w}, cs: newScheme(opt.Color), times: times, folds: map[heldKey]*bookmarkFold{}}
}

// Emit prints r if the filter passes it.
func (p *Pretty) Emit(r record.Record) {
	p.said = ""
	for _, x := range p.pass(r) {
		p.print(x)
	}
}

// Close writes what is held and returns the first write error; the
// summary record prints itself.
func (p *Pretty) Close() error {
	if p.joined != nil {
		p.sayJoined(nil)
	}
	p.endFolds()
	return p.w.Flush()
}

// Flush writes the lines held so far.
func (p *Pretty) Flush() { p.w.Flush() }

func (p *Pretty) ts(t time.Time) string {
	if t.IsZero() {
		return strings.Repeat(" ", 15)
	}
	return p.times.format(t)
}

func (p *Pretty) id(c *record.Conn) string {
	if c == nil {
		return ""
	}
	return p.cs.conn.Sprintf("#%d", c.ID)
}

// xid names an exchange's connection, and on an HTTP/2 connection, whose
// exchanges are streams that interleave, the stream too: "#1 s3".
func (p *Pretty) xid(c *record.Conn, exchange int) string {
	if c == nil || !c.HTTP2 || exchange == 0 {
		return p.id(c)
	}
	return p.cs.conn.Sprintf("#%d s%d", c.ID, exchange)
}

func (p *Pretty) print(r record.Record) {
	if p.joined != nil && p.sayJoined(r) {
		return
	}
	if t := r.When(); len(p.folds) > 0 && t.Sub(p.swept) >= time.Second {
		p.sweep(t)
	}
	switch v := r.(type) {
	case connRecord:
		id := v.who
		if v.noted {
			id = id.WithoutProcess() // the process note below names it
		}
		if id.Agent == nil && id.Process == nil && id.Node != "" {
			// Seen by kwatch on that node (--node, pod/NAME), its client
			// not known yet.
			p.said = ""
			p.w.printf("%s %s · node %s\n", p.id(v.conn), p.cs.header.Sprint(v.conn.String()), Escape(id.Node))
			return
		}
		if p.said = Escape(id.Text()); p.said != "" {
			p.w.printf("%s %s · client %s\n", p.id(v.conn), p.cs.header.Sprint(v.conn.String()), p.said)
			return
		}
		p.w.printf("%s %s\n", p.id(v.conn), p.cs.header.Sprint(v.conn.String()))
	case *record.Request:
		method, target := Escape(v.Method), Escape(v.Target)
		if len(v.Unknown) > 0 {
			// HTTP/2 joined mid-connection: a pseudo-header may be
			// among the fields HPACK could not decode.
			if method == "" {
				method = "?"
			}
			if target == "" {
				target = "(path not known)"
			}
			p.w.printf("%s %s > %s %s %s · %s%s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), method, target, Escape(v.Proto), UnknownText(v.Unknown), p.client(v))
			return
		}
		if n := p.watchNumber(v.Conn, v.Exchange); n > 0 && v.Conn.HTTP2 {
			// The streams of one connection interleave: say which
			// announced watch this stream is.
			p.w.printf("%s %s > %s %s %s · %s%s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), method, target, Escape(v.Proto),
				p.cs.header.Sprintf("WATCH %d", n), p.client(v))
			return
		}
		p.w.printf("%s %s > %s %s %s%s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), method, target, Escape(v.Proto), p.client(v))
	case *record.Response:
		if p.holdJoined(v) {
			return
		}
		p.printResponse(v, "")
	case *record.Event:
		if p.fold(v) {
			return
		}
		p.endFold(heldKey{v.Conn.Key(), v.Exchange})
		p.printEvent(v)
	case *record.End:
		p.endFold(heldKey{v.Conn.Key(), v.Exchange})
		p.printEnd(v)
	case *record.ConnNote:
		p.w.printf("%s %s %s\n", p.ts(v.Time), p.id(v.Conn), p.cs.dim.Sprint(Escape(v.Message)))
	case *record.Problem:
		p.printProblem(v)
	case *record.Summary:
		p.endFolds()
		p.printSummary(v)
	case *record.List:
		p.w.printf("%s %s %s: %s at resourceVersion %s (%s; %s)\n", p.ts(v.Time), p.cs.header.Sprint("LIST"),
			ScopeText(v.Scope), phrase.Count(v.Items, "item", "items"), Escape(v.ResourceVersion), v.Duration.Round(time.Millisecond), v.Reason)
		if v.Show {
			for _, o := range v.Objects {
				obj := Escape(o.Kind)
				if o.Namespace != "" {
					obj += " " + Escape(o.Namespace) + "/" + Escape(o.Name)
				} else {
					obj += " " + Escape(o.Name)
				}
				p.w.printf("%s %s  %s  rv %s\n", p.ts(v.Time), p.cs.dim.Sprintf("%-10s", "  listed"), obj, Escape(o.ResourceVersion))
			}
		}
	case *record.WatchStart:
		from := "from resourceVersion " + Escape(v.ResourceVersion)
		if v.ResourceVersion == "" {
			// Without a resourceVersion the server sends the current
			// state first (Kubernetes API concepts: semantics for watch).
			from = "from the current state (no resourceVersion)"
		}
		if v.Resource != "" {
			from = ScopeText(v.Scope) + " " + from
		}
		why := v.Reason
		if v.After > 0 {
			why += fmt.Sprintf(" after %s", v.After.Round(time.Millisecond))
		}
		p.w.printf("%s %s %s · %s · %s\n", p.ts(v.Time), p.cs.header.Sprintf("WATCH %d", v.Number), from, why, v.Transport)
	case *record.Relist:
		if v.Conn != nil {
			p.w.printf("%s %s %s %s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), p.cs.warning.Sprint("RE-LIST"), RelistText(v))
			return
		}
		p.w.printf("%s %s %s\n", p.ts(v.Time), p.cs.warning.Sprint("RE-LIST"), RelistText(v))
	case *record.Restart:
		p.w.printf("%s %s %s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), p.cs.warning.Sprint(RestartText(v)))
	case *record.Health:
		p.printHealth(v)
	case *record.Retry:
		p.w.printf("%s %s %s; retrying in %s\n", p.ts(v.Time), p.cs.warning.Sprint("retry:"), Escape(v.Error), v.Wait.Round(time.Millisecond))
	}
}

// ScopeText says what a list-watch covers in kubectl's terms: "configmaps
// in namespace default", "pods in all namespaces -l app=web",
// "namespaces" (cluster-scoped), with --field-selector when one was sent.
func ScopeText(s record.Scope) string {
	t := Escape(s.Resource)
	switch {
	case s.Namespace != "":
		t += " in namespace " + Escape(s.Namespace)
	case s.AllNamespaces:
		t += " in all namespaces"
	}
	if s.LabelSelector != "" {
		t += " -l " + Escape(s.LabelSelector)
	}
	if s.FieldSelector != "" {
		t += " --field-selector " + Escape(s.FieldSelector)
	}
	return t
}

// WatchRef names a watch as the lines of its exchange are prefixed: "#2",
// or "#2 s1" for a stream of an HTTP/2 connection.
func WatchRef(c *record.Conn, exchange int) string {
	if c == nil {
		return ""
	}
	if c.HTTP2 && exchange > 0 {
		return fmt.Sprintf("#%d s%d", c.ID, exchange)
	}
	return fmt.Sprintf("#%d", c.ID)
}

// RestartText says which watch a capture's watch followed, why it began and
// after what: "follows #2 s1: re-list, a watch-list from resourceVersion
// 208 (the last one seen), after a reset, 1.02s later".
func RestartText(r *record.Restart) string {
	prev := WatchRef(r.Prev, r.PrevExchange)
	if r.Prev != nil && r.Conn != nil && r.Prev.ID == r.Conn.ID && !r.Conn.HTTP2 {
		prev = "the watch before on #" + strconv.Itoa(r.Conn.ID)
	}
	from := "from resourceVersion " + Escape(r.ResourceVersion)
	switch {
	case r.ResourceVersion == "" || r.ResourceVersion == "0":
		from = "from no resourceVersion"
		if r.ResourceVersion == "0" {
			from = "from resourceVersion 0"
		}
	case r.LastResourceVersion == "":
		from += " (none seen before)"
	case r.LastResourceVersion == r.ResourceVersion:
		from += " (the last one seen)"
	default:
		from += " (the last one seen was " + Escape(r.LastResourceVersion) + ")"
	}
	how := "resume " + from
	if r.Why == record.WhyRelist {
		switch r.Relist {
		case record.RelistWatchList:
			how = "re-list, a watch-list " + from
		case record.RelistList:
			how = "re-list, a LIST then a watch " + from
		default:
			how = "re-list, a watch " + from + ", the state first"
		}
	}
	s := "follows " + prev + ": " + how
	switch r.After {
	case record.AfterGone:
		s += ", after 410 Gone"
	case record.AfterReset:
		s += ", after a reset"
	case record.AfterClosed:
		s += ", after the connection closed"
	case record.AfterServerEnded:
		s += ", after the server ended the watch"
	case record.AfterClientEnded:
		s += ", after the client ended the watch"
	case record.AfterRefused:
		s += ", after an error status"
	}
	return s + ", " + round(r.Gap) + " later"
}

// RelistText says what a re-list found changed while the watch was not
// running: "2 appeared (ns/a, ns/b) · 1 disappeared (ns/c) · 0 changed · 5
// unchanged". A capture's re-list (Conn set) says how many objects it sent
// and how they compare with what the client's earlier watches delivered:
// "9 objects sent: 7 unchanged (…) · 1 changed (ns/b) · …".
func RelistText(r *record.Relist) string {
	part := func(n int, names []string, what string) string {
		s := fmt.Sprintf("%d %s", n, what)
		if len(names) > 0 {
			s += " (" + Escape(strings.Join(names, ", "))
			if n > len(names) {
				s += ", …"
			}
			s += ")"
		}
		return s
	}
	if r.Conn != nil {
		unchanged := fmt.Sprintf("%d unchanged", r.Unchanged)
		if r.Unchanged > 0 {
			unchanged += " (the resourceVersion last seen: an informer's update handler gets each, old and new the same)"
		}
		parts := []string{unchanged, part(r.NChanged, r.Changed, "changed")}
		if r.Partial {
			return phrase.Count(r.Sent, "object", "objects") + " sent: " + strings.Join(append(parts,
				part(r.NAppeared, r.Appeared, "not seen before")), " · ") + " (the client's state before was not all captured)"
		}
		parts = append(parts, part(r.NAppeared, r.Appeared, "appeared"), part(r.NDisappeared, r.Disappeared, "disappeared"))
		return phrase.Count(r.Sent, "object", "objects") + " sent: " + strings.Join(parts, " · ")
	}
	return strings.Join([]string{
		part(r.NAppeared, r.Appeared, "appeared"),
		part(r.NDisappeared, r.Disappeared, "disappeared"),
		part(r.NChanged, r.Changed, "changed"),
		fmt.Sprintf("%d unchanged", r.Unchanged),
	}, " · ") + " while not watching"
}

// holdJoined holds v when it is the response of an HTTP/2 stream whose
// request was not seen (joined mid-connection), so that the note that
// names the stream's resource from its first event, which comes next, is
// said on the same line (sayJoined); it reports whether it held v.
func (p *Pretty) holdJoined(v *record.Response) bool {
	if !v.Watch || v.Conn == nil || !v.Conn.HTTP2 || v.Request != nil && v.Request.Target != "" {
		return false
	}
	p.joined, p.joinedSaid = v, p.said
	return true
}

// sayJoined says the response holdJoined held: with r when r is the
// "h2-joined" note naming its stream's resource (it reports true: r is
// said), else alone, before r.
func (p *Pretty) sayJoined(r record.Record) bool {
	resp := p.joined
	p.joined = nil
	// The response's line names its client unless the connection line
	// just above it did (said, as it was when it was held).
	said := p.said
	p.said = p.joinedSaid
	defer func() { p.said = said }()
	switch v := r.(type) {
	case *record.ConnNote:
		if v.Kind == "h2-joined" && v.Resource != nil && v.Conn.Key() == resp.Conn.Key() && int(v.Stream) == resp.Exchange {
			p.printResponse(resp, ResourceText(v.Resource, false))
			return true
		}
	case *record.Event:
		// A stream whose first event is a bookmark: its object names
		// the resource, not a namespace (the note that does comes
		// with the first other event).
		if v.Type == "BOOKMARK" && v.Kind != "" && v.Conn.Key() == resp.Conn.Key() && v.Exchange == resp.Exchange {
			p.printResponse(resp, ResourceText(&record.Resource{APIVersion: v.APIVersion, Kind: v.Kind, RowKind: v.RowKind}, true))
			return false
		}
	}
	p.printResponse(resp, "")
	return false
}

// ResourceText names what a stream joined mid-connection watches, as its
// first event's object says (record.Resource.WatchedText): "v1 ConfigMap
// (request not seen: named by its first event's object, in namespace
// demo; the namespace watched not known)", "Table rows (resource not seen;
// request not seen: …)"; bookmark: that event is a bookmark, whose object
// names no namespace. The namespace of the first object is not the
// namespace watched: a watch of every namespace has none.
func ResourceText(res *record.Resource, bookmark bool) string {
	where := ", cluster-scoped or in no namespace"
	switch {
	case bookmark:
		where = ", a bookmark"
	case res.Namespace != "":
		where = ", in namespace " + Escape(res.Namespace) + "; the namespace watched not known"
	}
	name, known := res.Watched()
	if !known {
		return Escape(name) + " (resource not seen; request not seen: its first event's object does not name it" + where + ")"
	}
	return Escape(res.WatchedText()) + " (request not seen: named by its first event's object" + where + ")"
}

// fold holds e when it is a bookmark to fold into its watch's line (see
// Options.Bookmarks), saying the fold once it spans BookmarkFold; it
// reports whether it held e. --wire shows each, with its chunk's bytes.
func (p *Pretty) fold(e *record.Event) bool {
	if p.opt.Bookmarks || p.opt.Wire || e.Type != "BOOKMARK" || e.InitialEventsEnd || e.Conn == nil {
		return false
	}
	k := heldKey{e.Conn.ID, e.Exchange}
	f := p.folds[k]
	if f == nil {
		if len(p.folds) >= maxFolds {
			return false
		}
		f = &bookmarkFold{conn: e.Conn, exchange: e.Exchange, firstSeq: e.Seq, firstRV: e.ResourceVersion, first: e.Time, line: p.eventLine(e)}
		p.folds[k] = f
	} else {
		f.line = ""
	}
	f.n++
	f.lastSeq, f.lastRV, f.last = e.Seq, e.ResourceVersion, e.Time
	if f.last.Sub(f.first) >= BookmarkFold {
		p.endFold(k)
	}
	return true
}

// endFold says the bookmarks folded for watch k, if any: the first's own
// line when it is alone, else "12 BOOKMARKs rv 2351→2410 over 4m58s
// (events 3-14)".
func (p *Pretty) endFold(k heldKey) {
	f := p.folds[k]
	if f == nil {
		return
	}
	delete(p.folds, k)
	if f.n == 1 {
		p.w.printf("%s", f.line)
		return
	}
	rv := "rv " + Escape(f.firstRV)
	if f.lastRV != f.firstRV {
		rv += "→" + Escape(f.lastRV)
	}
	p.w.printf("%s %s %3d %s %s over %s (events %d-%d)\n", p.ts(f.last), p.xid(f.conn, f.exchange), f.n,
		p.cs.bookmark.Sprint("BOOKMARKs"), rv, round(f.last.Sub(f.first)), f.firstSeq, f.lastSeq)
}

// sweep says the folds that began BookmarkFold or more before t, the
// time of the record about to be said, oldest first.
func (p *Pretty) sweep(t time.Time) {
	p.swept = t
	var due []heldKey
	for k, f := range p.folds {
		if t.Sub(f.first) >= BookmarkFold {
			due = append(due, k)
		}
	}
	p.endFoldsOf(due)
}

// endFolds says every fold held, oldest first.
func (p *Pretty) endFolds() {
	keys := make([]heldKey, 0, len(p.folds))
	for k := range p.folds {
		keys = append(keys, k)
	}
	p.endFoldsOf(keys)
}

// endFoldsOf says the folds of keys, oldest first (then by connection and
// exchange: the output does not depend on map order).
func (p *Pretty) endFoldsOf(keys []heldKey) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := p.folds[keys[i]], p.folds[keys[j]]
		if !a.first.Equal(b.first) {
			return a.first.Before(b.first)
		}
		if keys[i].conn != keys[j].conn {
			return keys[i].conn < keys[j].conn
		}
		return keys[i].exchange < keys[j].exchange
	})
	for _, k := range keys {
		p.endFold(k)
	}
}

// client names the client of a watch request, " · client kubectl/v1.37.2
// … get (pid 4242)", for the first line of each watch; "" for a request
// that is no watch, a client not known, or one the connection line just
// above named the same.
func (p *Pretty) client(v *record.Request) string {
	if !v.Watch {
		return ""
	}
	t := Escape(p.whoOf(v.Conn, v).Text())
	if t == "" || t == p.said {
		return ""
	}
	return " · client " + t
}

// printResponse says a response; res, when set, names the resource of a
// stream whose request was not seen (sayJoined, ResourceText).
func (p *Pretty) printResponse(v *record.Response, res string) {
	var parts []string
	switch v.Framing {
	case "chunked":
		parts = append(parts, "chunked")
	case "content-length":
		parts = append(parts, fmt.Sprintf("Content-Length %d", v.ContentLength))
	case "close":
		parts = append(parts, "read until close")
	}
	if v.ContentType != "" {
		parts = append(parts, Escape(v.ContentType))
	}
	if enc := v.Header["Content-Encoding"]; len(enc) > 0 {
		parts = append(parts, "Content-Encoding "+Escape(strings.Join(enc, ", ")))
	}
	if v.Watch {
		w := "watch"
		switch {
		case res != "":
			w += " of " + res
		case v.Request == nil:
			w += " (request not captured)"
		}
		parts = append(parts, w)
	}
	if v.Inferred {
		parts = append(parts, "inferred from the body")
	}
	if len(v.Unknown) > 0 {
		parts = append(parts, UnknownText(v.Unknown))
	}
	if v.Watch && v.Request == nil {
		// The first line of a watch whose request was not seen.
		if t := Escape(p.whoOf(v.Conn, nil).Text()); t != "" && t != p.said {
			parts = append(parts, "client "+t)
		}
	}
	status := fmt.Sprintf("%s %d %s", Escape(v.Proto), v.StatusCode, Escape(v.Reason))
	if v.StatusCode >= 400 {
		status = p.cs.problem.Sprint(status)
	}
	if len(parts) == 0 {
		p.w.printf("%s %s < %s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), status)
		return
	}
	p.w.printf("%s %s < %s · %s\n", p.ts(v.Time), p.xid(v.Conn, v.Exchange), status, strings.Join(parts, " · "))
}

// UnknownText says which header fields of an HTTP/2 header block HPACK
// could not decode: "2 header fields not known (HPACK entries 62, 65 from
// before the join)".
func UnknownText(u []record.UnknownField) string {
	idx := make([]string, len(u))
	for i, f := range u {
		idx[i] = strconv.FormatUint(f.Index, 10)
	}
	entries := "entries"
	if len(u) == 1 {
		entries = "entry"
	}
	return fmt.Sprintf("%s not known (HPACK %s %s from before the join)", phrase.Count(len(u), "header field", "header fields"), entries, strings.Join(idx, ", "))
}

// ChunkText describes the chunks that carried an event: "chunk 0x3aa = 938
// bytes", "3 chunks: 32768+32768+9560 bytes", "1 of 4 events in chunk 0x8000
// = 32768 bytes", or "425 bytes, not chunked" for a body that is not chunked
// (Content-Length, HTTP/2).
func ChunkText(e *record.Event) string {
	if len(e.Frames) > 0 {
		return frameText(e.Frames)
	}
	switch len(e.Chunks) {
	case 0:
		return fmt.Sprintf("%d bytes, not chunked", e.Length)
	case 1:
		c := e.Chunks[0]
		s := fmt.Sprintf("chunk 0x%s = %d bytes", Escape(c.SizeLine), c.Size)
		if c.Inflated > 0 {
			s += fmt.Sprintf(" → %d inflated", c.Inflated)
		}
		if c.Events > 1 {
			s = fmt.Sprintf("%d of %d events in %s", c.Ordinal, c.Events, s)
		}
		return s
	}
	sizes := make([]string, len(e.Chunks))
	shared := false
	for i, c := range e.Chunks {
		sizes[i] = fmt.Sprint(c.Size)
		if c.Events > 1 {
			shared = true
		}
	}
	s := fmt.Sprintf("%d chunks: %s bytes", len(e.Chunks), strings.Join(sizes, "+"))
	var inflated int64
	for _, c := range e.Chunks {
		inflated += c.Inflated
	}
	if inflated > 0 {
		s += fmt.Sprintf(" → %d inflated", inflated)
	}
	if shared {
		s += " (shared with other events)"
	}
	return s
}

// frameText describes the HTTP/2 DATA frames that carried an event: "DATA
// frame 3 = 938 bytes", "1 of 2 events in DATA frame 0 = 1450 bytes → 2900
// inflated", "13 DATA frames: 16384+…+3815 bytes".
func frameText(fs []record.Frame) string {
	if len(fs) == 1 {
		f := fs[0]
		s := fmt.Sprintf("DATA frame %d = %d bytes", f.Index, f.Data())
		if f.Padding > 0 {
			s += fmt.Sprintf(" (+%d padding)", f.Padding)
		}
		if f.Inflated > 0 {
			s += fmt.Sprintf(" → %d inflated", f.Inflated)
		}
		if f.Events > 1 {
			s = fmt.Sprintf("%d of %d events in %s", f.Ordinal, f.Events, s)
		}
		return s
	}
	sizes := make([]string, len(fs))
	shared := false
	var inflated int64
	for i, f := range fs {
		sizes[i] = fmt.Sprint(f.Data())
		shared = shared || f.Events > 1
		inflated += f.Inflated
	}
	s := fmt.Sprintf("%d DATA frames: %s bytes", len(fs), strings.Join(sizes, "+"))
	if inflated > 0 {
		s += fmt.Sprintf(" → %d inflated", inflated)
	}
	if shared {
		s += " (shared with other events)"
	}
	return s
}

// EventWhat says what a watch event carried, as its line shows it after
// the type: "ConfigMap default/a  rv 883", "rv 890
// (k8s.io/initial-events-end)" for a bookmark, the Status of an ERROR
// ("410 Expired: …"), "Table row default/a  rv 5" for kubectl's tables,
// "a JSON number: 1" for an object that is not a JSON object.
func EventWhat(e *record.Event) string {
	what := ""
	switch {
	case e.NotObject != "":
		what = "a JSON " + e.NotObject + ": " + Escape(phrase.Clip(string(e.Object), 60))
	case e.Type == "ERROR" && e.Status != nil:
		what = StatusText(e.Status)
	case e.Type == "BOOKMARK":
		what = "rv " + Escape(e.ResourceVersion)
		if e.InitialEventsEnd {
			what += " (k8s.io/initial-events-end)"
		}
	default:
		obj := Escape(e.Kind)
		if e.RowKind != "" {
			// A Table's row names the object (kubectl get -w).
			obj = "Table row"
			if e.RowKind != "PartialObjectMetadata" {
				obj += " " + Escape(e.RowKind)
			}
		}
		if e.Namespace != "" {
			obj += " " + Escape(e.Namespace) + "/" + Escape(e.Name)
		} else if e.Name != "" {
			obj += " " + Escape(e.Name)
		}
		what = fmt.Sprintf("%s  rv %s", obj, Escape(e.ResourceVersion))
		if e.Initial {
			what += "  initial"
		}
	}
	return what
}

// eventLine is an event's line: time, watch, number, type, what it
// carried and the chunks or DATA frames that carried it.
func (p *Pretty) eventLine(e *record.Event) string {
	c := p.cs.forType(e.Type)
	return fmt.Sprintf("%s %s %s %s  %s  %s\n", p.ts(e.Time), p.xid(e.Conn, e.Exchange), p.cs.dim.Sprintf("%3d", e.Seq),
		c.Sprintf("%-8s", Escape(e.Type)), EventWhat(e), p.cs.dim.Sprint(ChunkText(e)))
}

func (p *Pretty) printEvent(e *record.Event) {
	p.w.printf("%s", p.eventLine(e))
	for _, ch := range e.Changes {
		c := p.cs.modified
		switch ch[0] {
		case '+':
			c = p.cs.added
		case '-':
			c = p.cs.deleted
		}
		p.w.printf("%s      %s\n", strings.Repeat(" ", 15), c.Sprint(Escape(ch)))
	}
	if e.MoreChanges > 0 {
		p.w.printf("%s      %s\n", strings.Repeat(" ", 15), p.cs.dim.Sprint("… "+phrase.Count(e.MoreChanges, "more change", "more changes")))
	}
	if p.opt.Wire {
		for _, f := range e.Frames {
			p.w.printf("%s      DATA frame %d of stream %d @%d  length %d, padding %d, END_STREAM %v\n", strings.Repeat(" ", 15),
				f.Index, f.Stream, f.Offset, f.Length, f.Padding, f.EndStream)
		}
		for _, ch := range e.Chunks {
			p.w.printf("%s      chunk %d @%d  %s %s  %d data bytes  0d 0a\n", strings.Repeat(" ", 15),
				ch.Index, ch.Offset, hexBytes(ch.Header), p.cs.dim.Sprintf("%q", ch.Header), ch.Size)
		}
	}
}

// StatusText formats a metav1.Status on one line: "410 Expired: too old
// resource version: 1 (5)".
func StatusText(st *metav1.Status) string {
	reason := string(st.Reason)
	if reason == "" {
		reason = http.StatusText(int(st.Code))
	}
	s := fmt.Sprintf("%d %s", st.Code, Escape(reason))
	if st.Message != "" {
		s += ": " + Escape(strings.Join(strings.Fields(st.Message), " "))
	}
	return s
}

func hexBytes(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

func (p *Pretty) printEnd(e *record.End) {
	how := e.How
	if e.Detail != "" {
		how += ": " + e.Detail
	}
	if !e.Clean {
		how = p.cs.warning.Sprint(how)
	}
	parts := []string{"end: " + how}
	if e.Request {
		parts[0] = "request body end: " + how
	}
	if e.Watch {
		parts = append(parts, countsLine(e.Events))
	}
	if e.Chunks > 0 {
		cs := phrase.Count(e.Chunks, "chunk", "chunks")
		if !e.Watch && len(e.ChunkSizes) > 0 {
			sizes := make([]string, len(e.ChunkSizes))
			for i, n := range e.ChunkSizes {
				sizes[i] = fmt.Sprint(n)
			}
			cs += " (" + strings.Join(sizes, "+")
			if e.Chunks > len(e.ChunkSizes) {
				cs += "+…"
			}
			cs += " bytes)"
		}
		parts = append(parts, cs)
		parts = append(parts, fmt.Sprintf("%d data bytes in %d body bytes", e.Data, e.Bytes))
	} else if e.Frames > 0 {
		parts = append(parts, phrase.Count(e.Frames, "DATA frame", "DATA frames"), fmt.Sprintf("%d data bytes in %d frame bytes", e.Data, e.Bytes))
	} else if e.Bytes > 0 {
		parts = append(parts, fmt.Sprintf("%d body bytes", e.Bytes))
	}
	if e.Inflated > 0 || e.Members > 0 {
		parts = append(parts, fmt.Sprintf("inflated to %d bytes (%s)", e.Inflated, phrase.Count(e.Members, "member", "members")))
	}
	if e.Duration > 0 {
		parts = append(parts, e.Duration.Round(time.Millisecond).String())
	}
	if e.Problems > 0 {
		parts = append(parts, p.cs.warning.Sprint(phrase.Count(e.Problems, "problem", "problems")))
	}
	if e.Warnings > 0 {
		parts = append(parts, p.cs.warning.Sprint(phrase.Count(e.Warnings, "warning", "warnings")))
	}
	p.w.printf("%s %s %s\n", p.ts(e.Time), p.xid(e.Conn, e.Exchange), strings.Join(parts, " · "))
	if e.Status != nil {
		p.w.printf("%s %s %s\n", p.ts(e.Time), p.id(e.Conn), p.cs.problem.Sprint("status: "+StatusText(e.Status)))
	} else if e.BodyText != "" {
		p.w.printf("%s %s body: %s\n", p.ts(e.Time), p.id(e.Conn), Escape(strings.Join(strings.Fields(e.BodyText), " ")))
	}
	if p.opt.Wire && len(e.LastChunk) > 0 {
		p.w.printf("%s      last-chunk %s %s\n", strings.Repeat(" ", 15), hexBytes(e.LastChunk), p.cs.dim.Sprintf("%q", e.LastChunk))
	}
	for _, t := range e.Trailers {
		p.w.printf("%s %s trailer: %s\n", p.ts(e.Time), p.xid(e.Conn, e.Exchange), Escape(t))
	}
	if p.opt.Wire && len(e.TrailerEnd) > 0 {
		p.w.printf("%s      trailer end %s %s\n", strings.Repeat(" ", 15), hexBytes(e.TrailerEnd), p.cs.dim.Sprintf("%q", e.TrailerEnd))
	}
}

// ProblemText formats a problem on one line: location, kind, detail, hint.
func ProblemText(pr *record.Problem) string {
	s := pr.Location()
	if s != "" {
		s += ": "
	}
	s += pr.Kind
	if pr.Detail != "" {
		s += " (" + pr.Detail + ")"
	}
	if pr.Hint != "" {
		s += "; " + pr.Hint
	}
	return Escape(s)
}

func (p *Pretty) printProblem(pr *record.Problem) {
	label := p.cs.problem.Sprint("problem:")
	if pr.Warning {
		label = p.cs.warning.Sprint("warning:")
	}
	p.w.printf("%s %s %s\n", p.ts(pr.Time), label, ProblemText(pr))
}

func (p *Pretty) printSummary(s *record.Summary) {
	t := &p.tally
	if s.Live {
		parts := []string{
			phrase.Count(s.WatchesOpened, "watch", "watchs") + " opened",
			phrase.Count(s.Relists, "re-list", "re-lists"),
		}
		if s.Retries > 0 {
			retries := fmt.Sprintf("%d retries", s.Retries)
			if s.Retries == 1 {
				retries = "1 retry"
			}
			parts = append(parts, retries)
		}
		parts = append(parts, countsLine(t.Events))
		parts = append(parts, carriersText(t)...)
		parts = append(parts,
			fmt.Sprintf("%d bytes read", s.Bytes),
			s.Duration.Round(time.Millisecond).String(),
			fmt.Sprintf("%s, %s", phrase.Count(t.Problems, "problem", "problems"), phrase.Count(t.Warnings, "warning", "warnings")),
		)
		if s.WatchesOpened != 1 {
			parts[0] = fmt.Sprintf("%d watches opened", s.WatchesOpened)
		}
		if refused := s.WatchesRequested - s.WatchesOpened; refused > 0 {
			// A watch the server answered with an error status (or that
			// failed to connect) was asked for, not opened.
			parts[0] += fmt.Sprintf(" (%d requested)", s.WatchesRequested)
		}
		p.w.printf("%s %s\n", p.cs.header.Sprint("summary:"), strings.Join(parts, " · "))
		return
	}
	if line := NotDecryptedText(t.NotDecrypted); line != "" {
		p.w.printf("%s %s\n", p.cs.warning.Sprint("not decrypted:"), line)
	}
	if line := LeftOutText(s.LeftOut, p.opt.AllHTTP); line != "" {
		p.w.printf("%s %s\n", p.cs.warning.Sprint("left out:"), line)
	}
	parts := []string{
		phrase.Count(int(s.Packets), "packet", "packets"),
		phrase.Count(s.Connections, "TCP connection", "TCP connections"),
	}
	var conns []string
	if s.NoData > 0 {
		conns = append(conns, fmt.Sprintf("%d with no data", s.NoData))
	}
	if l := s.LeftOut; l != nil && l.Connections > 0 {
		conns = append(conns, fmt.Sprintf("%d left out by the filters", l.Connections))
	}
	if len(conns) > 0 {
		parts[1] += " (" + strings.Join(conns, "; ") + ")"
	}
	if s.Nodes > 0 {
		parts = append([]string{phrase.Count(s.Nodes, "node", "nodes")}, parts...)
	}
	if d := decryptedText(t.Decrypted); d != "" {
		parts = append(parts, d)
	}
	if u := undecodedText(t.Undecoded); u != "" {
		parts = append(parts, u)
	}
	watches := "1 watch"
	if t.Watches != 1 {
		watches = fmt.Sprintf("%d watches", t.Watches)
	}
	if l := s.LeftOut; l != nil && l.Watches > 0 {
		watches += fmt.Sprintf(" (%d left out by the filters)", l.Watches)
	}
	parts = append(parts, watches, countsLine(t.Events))
	if s.Versions > 0 {
		parts = append(parts, phrase.Count(s.Versions, "object version", "object versions"))
	}
	parts = append(parts, carriersText(t)...)
	pw := fmt.Sprintf("%s, %s", phrase.Count(t.Problems, "problem", "problems"), phrase.Count(t.Warnings, "warning", "warnings"))
	if t.Problems+t.Warnings > 0 {
		pw = p.cs.warning.Sprint(pw)
	}
	parts = append(parts, pw)
	p.w.printf("%s %s\n", p.cs.header.Sprint("summary:"), strings.Join(parts, " · "))
}

// NotDecryptedText says, in one line, which TLS connections were left out
// because they could not be decrypted, and what to do about them, e.g. "7
// TLS connections, 81234 bytes, not shown (4 with no key in the key logs):
// give kwatch their clients' key logs (…)"; "" when none was.
func NotDecryptedText(n NotDecrypted) string {
	if n.Connections == 0 {
		return ""
	}
	s := fmt.Sprintf("%s, %s, not shown", phrase.Count(n.Connections, "TLS connection", "TLS connections"), phrase.Count(int(n.Bytes), "byte", "bytes"))
	switch other := n.Connections - n.NoKey; {
	case n.NoKey > 0 && other > 0:
		s += fmt.Sprintf(" (%d with no key in the key logs; %d others: begun before the capture, or a suite kwatch does not decrypt)", n.NoKey, other)
	case n.NoKey > 0:
		s += fmt.Sprintf(" (%d with no key in the key logs)", n.NoKey)
	}
	return s + ": give kwatch their clients' key logs (--tls-keylog, SSLKEYLOGFILE; start the capture before they connect) to decode them, or --show-undecrypted to list each and why"
}

// LeftOutText says, in one line, what the summary's count of what the
// filters left out does not: the watches left out because what a filter
// asks was not seen, the other HTTP exchanges left out (allHTTP: they
// would have been shown), and the problems about them that are not shown;
// "" when there is none of those.
func LeftOutText(l *record.LeftOut, allHTTP bool) string {
	if l == nil {
		return ""
	}
	var parts []string
	if l.NotKnown > 0 {
		parts = append(parts, fmt.Sprintf("%d of the %s because what the filters ask was not seen (the User-Agent, resource or namespace of a watch whose request came before the capture or the join, or named HPACK entries from before it)",
			l.NotKnown, phrase.Count(l.Watches, "watch", "watches")))
	}
	if allHTTP && l.Exchanges > 0 {
		parts = append(parts, phrase.Count(l.Exchanges, "other HTTP exchange", "other HTTP exchanges"))
	}
	if l.Problems > 0 {
		parts = append(parts, phrase.Count(l.Problems, "problem", "problems")+" about what was left out, not shown")
	}
	return strings.Join(parts, "; ")
}

// decryptedText says how many TLS connections were decrypted and with
// which suites, e.g. "2 TLS decrypted (2 TLS 1.3 TLS_AES_128_GCM_SHA256)";
// "" when none was.
func decryptedText(m map[string]int) string {
	total := 0
	suites := make([]string, 0, len(m))
	for s, n := range m {
		total += n
		suites = append(suites, fmt.Sprintf("%d %s", n, s))
	}
	if total == 0 {
		return ""
	}
	sort.Strings(suites)
	return fmt.Sprintf("%d TLS decrypted (%s)", total, strings.Join(suites, ", "))
}

// undecodedText says how many connections could not be decoded and why,
// e.g. "3 not decoded: 2 TLS, 1 HTTP/2"; "" when there are none.
func undecodedText(m map[string]int) string {
	total := 0
	var why []string
	for _, k := range []struct{ kind, name string }{{"tls", "TLS"}, {"http2", "HTTP/2"}, {"not-http", "not HTTP"}} {
		if n := m[k.kind]; n > 0 {
			total += n
			why = append(why, fmt.Sprintf("%d %s", n, k.name))
		}
	}
	if total == 0 {
		return ""
	}
	return fmt.Sprintf("%d not decoded: %s", total, strings.Join(why, ", "))
}

// printQuiet prints the watches with no event and no finding: one as
// usual, several on one line.
func (p *Pretty) printQuiet() {
	switch len(p.quiet) {
	case 0:
		return
	case 1:
		p.w.printf("%s %s\n", p.cs.header.Sprintf("health %s:", p.quiet[0].label), p.quiet[0].text)
	default:
		var labels []string
		for i, q := range p.quiet {
			if i == 10 {
				labels = append(labels, "…")
				break
			}
			labels = append(labels, q.label)
		}
		p.w.printf("%s %d watches without events or findings\n", p.cs.header.Sprintf("health %s:", strings.Join(labels, ", ")), len(p.quiet))
	}
	p.quiet = nil
}

func eventCount(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// Escape makes bytes that came from the wire safe for a terminal: control
// characters (ESC, CR, …) and invalid UTF-8 become Go escapes, so a capture
// cannot move the cursor or recolor the screen.
func Escape(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var sb strings.Builder
	for i, r := range s {
		switch {
		case r == 0xfffd && !strings.HasPrefix(s[i:], "\ufffd"):
			fmt.Fprintf(&sb, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&sb, `\x%02x`, r)
		case isBidiOrSeparator(r):
			// Would reorder or break the line on a terminal
			// (Trojan Source, CVE-2021-42574).
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// isBidiOrSeparator reports whether r is a bidirectional control (U+061C,
// U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) or a line or paragraph
// separator (U+2028, U+2029).
func isBidiOrSeparator(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) ||
		(r >= 0x2066 && r <= 0x2069) || r == 0x2028 || r == 0x2029
}

// carriersText counts what carried the events: chunks, DATA frames, or
// both when a capture holds HTTP/1.1 and HTTP/2 watches ("0 chunks" alone
// when it holds neither).
func carriersText(t *Tally) []string {
	var parts []string
	if t.Chunks > 0 || t.Frames == 0 {
		parts = append(parts, phrase.Count(t.Chunks, "chunk", "chunks"))
	}
	if t.Frames > 0 {
		parts = append(parts, phrase.Count(t.Frames, "DATA frame", "DATA frames"))
	}
	return parts
}

// ChunkBucketNames name the buckets of record.ChunkBuckets, as the health
// lines and records show them.
var ChunkBucketNames = [...]string{"<1KiB", "1-4KiB", "4-16KiB", "16-32KiB", ">=32KiB"}

// HealthText formats a watch's (or the run's) health on one line.
func HealthText(h *record.Health) string {
	var parts []string
	if h.Scope == "all" {
		parts = append(parts, phrase.Count(h.Watches, "watch", "watchs"))
		if h.Watches != 1 {
			parts[0] = fmt.Sprintf("%d watches", h.Watches)
		}
	}
	parts = append(parts, countsLine(h.Events))
	switch len(h.Findings) {
	case 0:
		parts = append(parts, "resourceVersions in order")
	default:
		var fs []string
		for _, f := range h.Findings {
			if len(fs) == 5 {
				fs = append(fs, "…")
				break
			}
			fs = append(fs, fmt.Sprintf("%s at event %d (%s)", f.Kind, f.Seq, Escape(f.Detail)))
		}
		parts = append(parts, phrase.Count(len(h.Findings)+h.FindingsNotListed, "finding", "findings")+": "+strings.Join(fs, "; "))
	}
	if b := h.Began; b != nil {
		s := "began " + round(b.Gap) + " after " + WatchRef(b.Prev, b.PrevExchange) + ": " + b.Reason()
		if h.Resent > 0 {
			s += fmt.Sprintf(", %d of %s sent again unchanged", h.ResentUnchanged, phrase.Count(h.Resent, "object", "objects"))
		}
		parts = append(parts, s)
	}
	if h.Cut != nil {
		parts = append(parts, "ended by "+h.Cut.String())
	}
	if h.Cuts > 0 {
		parts = append(parts, phrase.Count(h.Cuts, "watch", "watches")+" ended badly by the server")
	}
	if h.FirstEvent > 0 {
		parts = append(parts, "first event after "+round(h.FirstEvent))
	}
	if h.InitialEvents > 0 || h.InitialEnd > 0 {
		s := phrase.Count(h.InitialEvents, "initial event", "initial events")
		if h.InitialEnd > 0 {
			s += ", initial-events-end after " + round(h.InitialEnd)
		}
		parts = append(parts, s)
	}
	if h.MaxGap > 0 {
		s := "longest quiet " + round(h.MaxGap)
		if h.MaxGapAfter > 0 {
			s += fmt.Sprintf(" (after event %d)", h.MaxGapAfter)
		}
		parts = append(parts, s)
	}
	if h.ZeroWindows > 0 {
		parts = append(parts, fmt.Sprintf("TCP zero window %s, %s", phrase.Count(h.ZeroWindows, "time", "times"), round(h.ZeroWindow)))
	}
	if h.FlowStalls > 0 {
		parts = append(parts, fmt.Sprintf("flow-control stall %s, %s", phrase.Count(h.FlowStalls, "time", "times"), round(h.FlowStall)))
	}
	if b := h.Bookmarks; b.Count > 1 && b.Max > 0 && b.Measured > 0 && b.Measured < b.Count-1 {
		// Pooled from some watches only: say of how many intervals.
		parts = append(parts, fmt.Sprintf("%d bookmarks, every %s within a watch (min %s, max %s; %s)", b.Count, round(b.Median), round(b.Min), round(b.Max),
			phrase.Count(b.Measured, "interval", "intervals")))
	} else if b.Count > 1 && b.Max > 0 {
		parts = append(parts, fmt.Sprintf("%d bookmarks, every %s (min %s, max %s)", b.Count, round(b.Median), round(b.Min), round(b.Max)))
	} else if b.Count > 1 {
		parts = append(parts, fmt.Sprintf("%d bookmarks", b.Count)) // in different watches: no interval
	} else if b.Count == 1 {
		parts = append(parts, "1 bookmark")
	}
	var hist []string
	for i, n := range h.ChunkSizes {
		if n > 0 {
			hist = append(hist, fmt.Sprintf("%s %d", ChunkBucketNames[i], n))
		}
	}
	if len(hist) > 0 {
		parts = append(parts, "chunks "+strings.Join(hist, ", "))
	}
	if total := h.FramingBytes + h.DataBytes; total > 0 {
		parts = append(parts, fmt.Sprintf("framing %d of %d bytes (%.1f%%)", h.FramingBytes, total, 100*float64(h.FramingBytes)/float64(total)))
	}
	switch {
	case h.InflatedBytes <= 0 || h.CompressedBytes <= 0:
	case h.CompressedBytes > h.InflatedBytes:
		// gzip's header and trailer on little data: what was sent grew.
		parts = append(parts, fmt.Sprintf("compressed %d bytes into %d (larger by %d)",
			h.InflatedBytes, h.CompressedBytes, h.CompressedBytes-h.InflatedBytes))
	default:
		parts = append(parts, fmt.Sprintf("compressed %d of %d bytes (%.1f:1)",
			h.CompressedBytes, h.InflatedBytes, float64(h.InflatedBytes)/float64(h.CompressedBytes)))
	}
	if h.Scope == "all" && (h.Restarts > 0 || h.Relists > 0) {
		var rs []string
		for r, n := range h.RestartReasons {
			rs = append(rs, fmt.Sprintf("%d× %s", n, r))
		}
		sort.Strings(rs)
		restarts := phrase.Count(h.Restarts, "restart", "restarts")
		if len(rs) > 0 {
			restarts += " (" + strings.Join(rs, "; ") + ")"
		}
		relists := restarts + ", " + phrase.Count(h.Relists, "re-list", "re-lists")
		if h.Resent > 0 {
			relists += fmt.Sprintf(" (%d of %s sent again unchanged)", h.ResentUnchanged, phrase.Count(h.Resent, "object", "objects"))
		}
		parts = append(parts, relists)
	}
	return strings.Join(parts, " · ")
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.String()
}

func (p *Pretty) printHealth(h *record.Health) {
	label := "health:"
	if h.Scope == "watch" && h.Conn != nil {
		// The connection number is not coloured on its own here: its
		// colour's reset would end the label's bold after it.
		label = p.watchLabel(h.Conn, h.Exchange)
		if len(h.Findings) == 0 && h.Cut == nil && eventCount(h.Events) == 0 {
			// Said together with the other watches that have nothing
			// to say, so that they do not bury those that do.
			p.quiet = append(p.quiet, quietWatch{label, HealthText(h)})
			return
		}
		label = "health " + label + ":"
	}
	if h.Scope == "all" {
		p.printQuiet()
		if h.Watches <= 1 && h.Restarts == 0 && h.Relists == 0 {
			return // the one watch's line says it all
		}
	}
	text := HealthText(h)
	if len(h.Findings) > 0 || h.Cut != nil || h.Cuts > 0 {
		text = p.cs.warning.Sprint(text)
	}
	p.w.printf("%s %s\n", p.cs.header.Sprint(label), text)
}
