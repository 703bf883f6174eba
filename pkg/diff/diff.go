// Package diff shows what changed in each MODIFIED and DELETED watch event:
// it keeps the last version of every object a watch delivered (keyed by
// apiVersion, kind, namespace, name and uid) and computes an RFC 7386 JSON
// merge patch from that version to the new one, leaving out fields that
// change on every write (metadata.managedFields, metadata.resourceVersion,
// metadata.generation) unless asked to keep them. The patch is attached to
// the event record, with the changes as lines for printers.
//
// A meta.k8s.io Table event (kubectl get -w asks for Tables) is diffed by
// its row, not as the Table: only a watch's first Table carries the
// columnDefinitions, and the row is an array element, which a merge patch
// replaces whole. Its row is read as {"cells": {NAME: value, …}, "object":
// the row's object}, each cell named by its column in the watch's first
// columnDefinitions (Kubernetes API concepts: receiving resources as
// Tables), and the object kept under the row object's namespace and name
// (record.Event's for a Table).
//
// The patch is computed here, not with a library: json-patch's
// CreateMergePatch (client-go's dependency) reads both versions into Go
// maps of float64 numbers, so a number past 2^53 changed without a patch
// saying so, and an array of millions of elements took gigabytes. Here
// objects are read into members once, in one pass over their bytes, and
// every other value (array, string, number, literal) is compared and
// copied as its bytes as sent.
package diff

import (
	"bytes"
	"container/list"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/record"
)

// Limits of what a Differ keeps and shows.
const (
	// MaxObjects is how many objects' last versions are kept; the oldest
	// is forgotten first.
	MaxObjects = 10000
	// MaxBytes bounds the bytes of kept versions, in all.
	MaxBytes = 256 << 20
	// MaxChangeLines bounds the change lines of one event; the changes
	// past it are counted (record.Event.MoreChanges). The merge patch
	// holds them all.
	MaxChangeLines = 100
	// MaxMembers bounds the object members (at all depths) one version
	// of an object may have to be diffed: reading them takes about 100
	// bytes each, twice (the old version and the new). A Kubernetes object
	// of that many is over the 1.5 MiB etcd stores by default; a larger
	// one has no diff and is not kept.
	MaxMembers = 1 << 18
	// maxDepth bounds the nesting of objects read, as the event decoder's
	// own bound (an object nested deeper has no diff).
	maxDepth = 10000
	// maxPathBytes bounds a change line's path; a longer one keeps its
	// start and end around "…".
	maxPathBytes = 200
)

// NoiseFields are left out of the diff unless Options.All is set, as
// paths of object keys.
var NoiseFields = [][]string{
	{"metadata", "managedFields"},
	{"metadata", "resourceVersion"},
	{"metadata", "generation"},
}

// Options tune a Differ.
type Options struct {
	// All keeps NoiseFields in the diff.
	All bool
	// PerWatch keeps versions apart per watch: in a capture, each watch
	// is a client's (two on one HTTP/2 connection, an informer's and a
	// plain Watch, are two), and an object's previous version is the one
	// that watch delivered, or the watch it followed (a resume or a
	// re-list after it ended, which pkg/rewatch links with a
	// record.Restart: place the Differ after a rewatch.Linker). kwatch
	// stream leaves it off: its watches are one client's, one after
	// another, and a resumed watch diffs against what the previous one
	// delivered.
	PerWatch bool
}

// watchKey names one watch of a capture: its connection and exchange.
type watchKey struct{ conn, exchange int }

// maxWatches bounds the watches whose chain a Differ remembers; past it
// the memory is emptied (a later watch that follows a forgotten one starts
// a chain of its own).
const maxWatches = 1 << 16

// Differ is a record.Sink that adds Diff and Changes to events and passes
// every record on. Create it with New.
type Differ struct {
	next record.Sink
	opt  Options
	// last holds each object's last version, by key; order lists the
	// keys from the first remembered to the last, so that forgetting
	// the oldest, or any, takes constant time.
	last  map[string]*list.Element // of *kept
	order *list.List
	bytes int
	// chains maps each watch (PerWatch) to the first watch of the
	// chain of watches that followed one another, whose versions it
	// shares.
	chains map[watchKey]watchKey
	// columns holds the column names of each watch's first Table that
	// had columnDefinitions (at most maxWatches watches).
	columns map[watchKey][]string
}

// kept is one object's last version (its JSON as sent) under its key.
type kept struct {
	key string
	obj []byte
}

// New returns a Differ passing records on to next.
func New(next record.Sink, opt Options) *Differ {
	return &Differ{next: next, opt: opt, last: map[string]*list.Element{}, order: list.New(), chains: map[watchKey]watchKey{},
		columns: map[watchKey][]string{}}
}

// Flush flushes the next sink (record.Flusher).
func (d *Differ) Flush() { record.Flush(d.next) }

// Emit diffs events against the last version of their object, then passes r on.
func (d *Differ) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Event:
		d.event(v)
	case *record.Restart:
		if d.opt.PerWatch && v.Conn != nil && v.Prev != nil {
			if len(d.chains) >= maxWatches {
				clear(d.chains)
			}
			d.chains[watchKey{v.Conn.ID, v.Exchange}] = d.chain(v.Prev, v.PrevExchange)
		}
	case *record.List:
		// A LIST gives every object's current version: the first change a
		// watch then delivers has something to diff with.
		for _, o := range v.Objects {
			if _, err := parse(o.JSON); err == nil {
				d.remember(d.key(nil, 0, o.APIVersion, o.Kind, o.Namespace, o.Name, o.UID), bytes.Clone(o.JSON))
			}
		}
	}
	d.next.Emit(r)
}

// chain returns the first watch of the chain watch (c, exchange) is in.
func (d *Differ) chain(c *record.Conn, exchange int) watchKey {
	w := watchKey{c.ID, exchange}
	if first, ok := d.chains[w]; ok {
		return first
	}
	return w
}

// key names an object by its apiVersion, kind, namespace, name and uid
// (and, PerWatch, the chain of its watch: connection and exchange of the
// chain's first), NUL between them: no part can hold one that changes
// where the others begin (a namespace "a/b" and name "c" are not
// namespace "a" and name "b/c").
func (d *Differ) key(c *record.Conn, exchange int, apiVersion, kind, ns, name, uid string) string {
	k := apiVersion + "\x00" + kind + "\x00" + ns + "\x00" + name + "\x00" + uid
	if d.opt.PerWatch && c != nil {
		w := d.chain(c, exchange)
		k = strconv.Itoa(w.conn) + "\x00" + strconv.Itoa(w.exchange) + "\x00" + k
	}
	return k
}

func (d *Differ) event(e *record.Event) {
	switch e.Type {
	case "ADDED", "MODIFIED", "DELETED":
	default:
		return
	}
	key := d.key(e.Conn, e.Exchange, e.APIVersion, e.Kind, e.Namespace, e.Name, e.UID)
	obj := []byte(e.Object)
	table := false
	if e.Kind == "Table" && strings.HasPrefix(e.APIVersion, "meta.k8s.io/") {
		obj, table = d.rowView(e)
		if !table {
			d.forget(key)
			return
		}
	}
	cur, err := parse(obj)
	if err != nil {
		// Nothing to diff with, nor to diff the next version with.
		d.forget(key)
		return
	}
	if el, ok := d.last[key]; ok && e.Type != "ADDED" {
		if old, err := parse(el.Value.(*kept).obj); err == nil {
			e.Diff, e.Changes, e.MoreChanges = d.mergePatch(old, cur, table)
		}
	}
	if e.Type == "DELETED" {
		d.forget(key)
		return
	}
	if !table {
		obj = bytes.Clone(obj)
	}
	d.remember(key, obj)
}

// tableEvent is what rowView reads of a Table: its column names and its
// rows' cells and objects, values as sent.
type tableEvent struct {
	ColumnDefinitions []struct {
		Name string `json:"name"`
	} `json:"columnDefinitions"`
	Rows []struct {
		Cells  []json.RawMessage `json:"cells"`
		Object json.RawMessage   `json:"object"`
	} `json:"rows"`
}

// rowView returns the row of Table event e as the Differ diffs it:
// {"cells":{NAME:value,…},"object":OBJECT}, its cells named by the
// columns of the watch's first columnDefinitions (a cell past them, or of
// a watch whose first Table was not seen, by its index from 0; a name
// that repeats, or is empty, with "#" and its index after it), its object
// as sent ("object" left out when the row has none). ok is false for a
// Table that cannot be read, or of other than one row.
func (d *Differ) rowView(e *record.Event) (view []byte, ok bool) {
	var t tableEvent
	if json.Unmarshal(e.Object, &t) != nil || len(t.Rows) != 1 {
		return nil, false
	}
	w := watchKey{-1, 0}
	if e.Conn != nil {
		w = watchKey{e.Conn.ID, e.Exchange}
		if d.opt.PerWatch {
			w = d.chain(e.Conn, e.Exchange)
		}
	}
	names, known := d.columns[w]
	if !known && len(t.ColumnDefinitions) > 0 {
		seen := map[string]bool{}
		for i, c := range t.ColumnDefinitions {
			n := c.Name
			if n == "" || seen[n] {
				n += "#" + strconv.Itoa(i)
			}
			seen[n] = true
			names = append(names, n)
		}
		if len(d.columns) >= maxWatches {
			clear(d.columns)
		}
		d.columns[w] = names
	}
	var b bytes.Buffer
	b.WriteString(`{"cells":{`)
	for i, c := range t.Rows[0].Cells {
		if i > 0 {
			b.WriteByte(',')
		}
		n := strconv.Itoa(i)
		if i < len(names) {
			n = names[i]
		}
		writeString(&b, n)
		b.WriteByte(':')
		b.Write(c)
	}
	b.WriteByte('}')
	if o := t.Rows[0].Object; len(o) > 0 && string(o) != "null" {
		b.WriteString(`,"object":`)
		b.Write(o)
	}
	b.WriteByte('}')
	return b.Bytes(), true
}

// remember keeps obj as the last version of key, then forgets the versions
// remembered first while more than MaxObjects or MaxBytes are kept.
func (d *Differ) remember(key string, obj []byte) {
	if el, ok := d.last[key]; ok {
		k := el.Value.(*kept)
		d.bytes += len(obj) - len(k.obj)
		k.obj = obj
	} else {
		d.last[key] = d.order.PushBack(&kept{key: key, obj: obj})
		d.bytes += len(obj)
	}
	for (len(d.last) > MaxObjects || d.bytes > MaxBytes) && d.order.Len() > 0 {
		d.forget(d.order.Front().Value.(*kept).key)
	}
}

// forget drops what is kept of key.
func (d *Differ) forget(key string) {
	if el, ok := d.last[key]; ok {
		d.bytes -= len(el.Value.(*kept).obj)
		d.order.Remove(el)
		delete(d.last, key)
	}
}

// mergePatch returns the RFC 7386 merge patch from old to cur (both
// objects): members of both objects compared member by member, any other
// value that changed replaced whole, a member cur lacks as null, members in
// key order, "{}" when nothing changed; and its changes as lines, at most
// MaxChangeLines, and a count of the others: "~ data.k: "v1" → "v2"",
// "+ metadata.labels.app: "web"", "- data.x: "1"". A member set to null
// reads "~ data.x: "1" → null" (its patch, as RFC 7386 has it, deletes).
//
// For a Table's row view (rowView) NoiseFields are the row object's.
func (d *Differ) mergePatch(old, cur *node, table bool) (patch []byte, lines []string, more int) {
	p := &patcher{all: d.opt.All, table: table}
	var b bytes.Buffer
	p.object(&b, old, cur)
	return b.Bytes(), p.lines, p.more
}

// patcher writes a merge patch and collects its change lines.
type patcher struct {
	all   bool
	table bool     // a Table's row view: NoiseFields are under "object"
	path  []string // keys of the objects above the one compared
	lines []string
	more  int // changes past MaxChangeLines
}

// object writes the merge patch from old to cur (both objects) to b and
// reports whether it has a member.
func (p *patcher) object(b *bytes.Buffer, old, cur *node) bool {
	b.WriteByte('{')
	n := 0
	member := func(k string) {
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		writeString(b, k)
		b.WriteByte(':')
	}
	i, j := 0, 0
	for i < len(old.members) || j < len(cur.members) {
		switch {
		case j == len(cur.members) || (i < len(old.members) && string(old.members[i].key) < string(cur.members[j].key)):
			k, ov := string(old.members[i].key), &old.members[i].val
			i++
			if !p.noise(k) {
				member(k)
				b.WriteString("null")
				p.line("- ", k, ov.raw, nil)
			}
		case i == len(old.members) || string(cur.members[j].key) < string(old.members[i].key):
			k, nv := string(cur.members[j].key), &cur.members[j].val
			j++
			if !p.noise(k) {
				member(k)
				b.Write(appendCompact(b.AvailableBuffer(), nv.raw, -1))
				p.line("+ ", k, nil, nv.raw)
			}
		default:
			k, ov, nv := string(cur.members[j].key), &old.members[i].val, &cur.members[j].val
			i, j = i+1, j+1
			switch {
			case p.noise(k):
			case ov.obj && nv.obj:
				mark, before := b.Len(), n
				member(k)
				p.path = append(p.path, k)
				if !p.object(b, ov, nv) {
					b.Truncate(mark)
					n = before
				}
				p.path = p.path[:len(p.path)-1]
			case !bytes.Equal(ov.raw, nv.raw):
				oText, nText := appendCompact(nil, ov.raw, -1), appendCompact(nil, nv.raw, -1)
				if bytes.Equal(oText, nText) {
					break // the same value spaced otherwise
				}
				member(k)
				b.Write(nText)
				if !p.full() {
					from := changeStart(oText, nText)
					p.lines = append(p.lines, "~ "+p.pathText(k)+": "+short(oText, from)+" → "+short(nText, from))
				}
			}
		}
	}
	b.WriteByte('}')
	return n > 0
}

// noise reports whether member k of the object at p.path is one of
// NoiseFields, left out unless all.
func (p *patcher) noise(k string) bool {
	if p.all {
		return false
	}
	path := p.path
	if p.table {
		if len(path) == 0 || path[0] != "object" {
			return false
		}
		path = path[1:]
	}
	for _, f := range NoiseFields {
		if len(f) == len(path)+1 && f[len(f)-1] == k && slices.Equal(f[:len(path)], path) {
			return true
		}
	}
	return false
}

// full reports whether MaxChangeLines change lines are there, and then
// counts one more change.
func (p *patcher) full() bool {
	if len(p.lines) < MaxChangeLines {
		return false
	}
	p.more++
	return true
}

// line adds a change line for member k of the object at p.path, added or
// removed: op, its path, then its value (raw, the value as sent).
func (p *patcher) line(op, k string, old, cur []byte) {
	if p.full() {
		return
	}
	raw := cur
	if raw == nil {
		raw = old
	}
	// Only the start of a long value is shown: only that is compacted.
	p.lines = append(p.lines, op+p.pathText(k)+": "+short(appendCompact(nil, raw, shortBytes+1), 0))
}

// pathText writes the path of member k of the object at p.path as
// "metadata.labels.app", a key that holds . [ ] " or a space, is empty, or
// holds what strconv.Quote escapes, as ["a.b"] (so that two keys never
// read the same); past maxPathBytes its middle is left out.
func (p *patcher) pathText(k string) string {
	var sb strings.Builder
	for i, seg := range append(p.path, k) {
		switch {
		case seg == "" || strings.ContainsAny(seg, ".[]\" ") || strconv.Quote(seg) != `"`+seg+`"`:
			// (also a key with a character Quote escapes: a control, a
			// backslash, a line separator, bytes that are no UTF-8)
			sb.WriteString("[" + strconv.Quote(seg) + "]")
		case i > 0:
			sb.WriteString("." + seg)
		default:
			sb.WriteString(seg)
		}
	}
	s := sb.String()
	if len(s) <= maxPathBytes {
		return s
	}
	head, tail := runeStart(s, maxPathBytes/3), runeStart(s, len(s)-maxPathBytes*2/3)
	return s[:head] + "…" + s[tail:]
}

// shortBytes is the most of a value a change line shows.
const shortBytes = 60

// short returns the JSON text s as a change line shows it: from byte from
// on (after "…" when from > 0), at most shortBytes of it ("…" at a cut).
func short(b []byte, from int) string {
	s := string(b[from:min(len(b), from+shortBytes+1)])
	lead := ""
	if from > 0 {
		lead = "…"
	}
	if len(s) > shortBytes {
		s = s[:cutPoint(s, shortBytes-3)] + "…"
	}
	return lead + s
}

// changeStart returns where a change line starts showing two values' JSON
// texts o and n when either is too long to show whole: 20 bytes before the
// first byte where they differ when that byte would be cut off (a
// ConfigMap's file changed near its end), so that the change is in sight;
// else 0.
func changeStart(o, n []byte) int {
	if len(o) <= shortBytes && len(n) <= shortBytes {
		return 0
	}
	i := 0
	for i < len(o) && i < len(n) && o[i] == n[i] {
		i++
	}
	const context = 20
	if i+context <= shortBytes-3 {
		return 0 // in sight from the start, with context after it
	}
	return cutPoint(o, i-context) // o and n agree up to i
}

// runeStart returns i, or the start of the character i falls inside: at
// most utf8.UTFMax-1 bytes back, so that bytes that are no UTF-8 (a run of
// continuation bytes, which JSON decoders let through) are cut anywhere.
func runeStart[T string | []byte](s T, i int) int {
	for back := 0; back < utf8.UTFMax-1 && i > 0 && i < len(s) && !utf8.RuneStart(s[i]); back++ {
		i--
	}
	return i
}

// cutPoint returns where JSON text s may be cut at or before i: not inside
// a character (runeStart) nor inside an escape such as \u00e9.
func cutPoint[T string | []byte](s T, i int) int {
	i = runeStart(s, i)
	for j := i - 1; j >= 0 && j >= i-5; j-- {
		if s[j] != '\\' {
			continue
		}
		k := j // s[j] starts an escape if the backslashes before it pair up
		for k > 0 && s[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			n := 2
			if j+1 < len(s) && s[j+1] == 'u' {
				n = 6
			}
			if j+n > i {
				return j
			}
		}
		break
	}
	return i
}

// appendCompact appends the JSON text raw (read as JSON before) to dst
// without whitespace outside strings, escapes and numbers as sent, and
// returns the extended slice; a limit of 0 or more stops it once it
// appended more than limit bytes.
func appendCompact(dst, raw []byte, limit int) []byte {
	start := len(dst)
	for i := 0; i < len(raw); {
		if limit >= 0 && len(dst)-start > limit {
			break
		}
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		case '"':
			end, ok := event.ValueEnd(raw, i) // the string, whole
			if !ok {
				return append(dst, raw[i:]...) // not reached
			}
			dst = appendUpTo(dst, raw[i:end], start, limit)
			i = end
			continue
		}
		j := i + 1
		for j < len(raw) && raw[j] != '"' && raw[j] != ' ' && raw[j] != '\t' && raw[j] != '\n' && raw[j] != '\r' {
			j++
		}
		dst = appendUpTo(dst, raw[i:j], start, limit)
		i = j
	}
	return dst
}

// appendUpTo appends p to dst, only as much of it as takes what was
// appended since start to limit+1 bytes when limit is 0 or more.
func appendUpTo(dst, p []byte, start, limit int) []byte {
	if limit >= 0 {
		p = p[:min(len(p), max(0, limit+1-(len(dst)-start)))]
	}
	return append(dst, p...)
}

// writeString writes s to b as a JSON string, without encoding/json's
// escaping of < > &.
func writeString(b *bytes.Buffer, s string) {
	plain := utf8.ValidString(s)
	for i := 0; plain && i < len(s); i++ {
		plain = s[i] >= 0x20 && s[i] != '"' && s[i] != '\\'
	}
	if plain {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// node is one JSON value: its bytes as sent and, for an object, its
// members in key order (of duplicate keys the last, as encoding/json reads
// them).
type node struct {
	raw     []byte
	members []member // nil for anything but an object
	obj     bool
}

// member is one member of an object: its key (escapes undone) and value.
type member struct {
	key []byte
	val node
}

var (
	errMalformed = errors.New("malformed JSON")
	errNotObject = errors.New("not a JSON object")
	errTooDeep   = errors.New("objects nested too deep")
	errTooLarge  = errors.New("too many object members")
)

// parse reads the JSON object data (the object of a watch event, which
// was read as JSON before) in one pass: its members and their objects'
// members, every other value as its bytes (pkg/event's reader, which
// delimits values as the event decoder does).
func parse(data []byte) (*node, error) {
	i := len(data) - len(bytes.TrimLeft(data, jsonSpace))
	if i == len(data) || data[i] != '{' {
		return nil, errNotObject
	}
	n := &node{}
	members := 0
	end, err := parseValue(n, data, i, 0, &members)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimLeft(data[end:], jsonSpace)) != 0 {
		return nil, errMalformed
	}
	return n, nil
}

// jsonSpace is JSON's whitespace (RFC 8259 §2).
const jsonSpace = " \t\n\r"

// parseValue reads the value starting at data[i] at nesting depth into n
// and returns the index just past it; *members counts the object members
// read.
func parseValue(n *node, data []byte, i, depth int, members *int) (int, error) {
	if i >= len(data) || data[i] != '{' {
		end, ok := event.ValueEnd(data, i)
		if !ok || end <= i {
			return 0, errMalformed
		}
		n.raw = data[i:end]
		return end, nil
	}
	if depth >= maxDepth {
		return 0, errTooDeep
	}
	n.obj = true
	end, err := event.ReadObject(data, i, func(key []byte, vStart int) (int, error) {
		key, ok := event.FieldKey(key)
		if !ok {
			return 0, errMalformed
		}
		if *members++; *members > MaxMembers {
			return 0, errTooLarge
		}
		n.members = append(n.members, member{key: key})
		return parseValue(&n.members[len(n.members)-1].val, data, vStart, depth+1, members)
	})
	if err != nil {
		return 0, err
	}
	n.raw = data[i:end]
	n.sortMembers()
	return end, nil
}

// sortMembers puts n's members in key order, keeping the last of
// duplicate keys.
func (n *node) sortMembers() {
	slices.SortStableFunc(n.members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	out := n.members[:0]
	for x := range n.members {
		if x+1 < len(n.members) && bytes.Equal(n.members[x+1].key, n.members[x].key) {
			continue // a later duplicate follows
		}
		out = append(out, n.members[x])
	}
	n.members = slices.Clip(out)
}
