// Package diff shows what changed in each MODIFIED and DELETED watch event:
// it keeps the last version of every object a watch delivered (keyed by
// namespace, name and uid) and computes an RFC 7386 JSON merge patch from
// that version to the new one with json-patch's CreateMergePatch (already in
// client-go's dependencies), after removing fields that change on every
// write (metadata.managedFields, metadata.resourceVersion,
// metadata.generation) unless asked to keep them. The patch is attached to
// the event record; printers show it as field-level changes.
package diff

import (
	"container/list"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/kwatch/kwatch/pkg/record"
)

// Limits of what a Differ keeps.
const (
	// MaxObjects is how many objects' last versions are kept; the oldest
	// is forgotten first.
	MaxObjects = 10000
	// MaxBytes bounds the bytes of kept versions, in all.
	MaxBytes = 256 << 20
)

// NoiseFields are removed before diffing unless Options.All is set, as
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
	// PerConnection keeps versions apart per connection: in a capture,
	// each connection is another client's watch, and its previous version
	// is the one that watch delivered. kwatch stream leaves it off, so that
	// a resumed watch diffs against what the previous watch delivered.
	PerConnection bool
}

// Differ is a record.Sink that adds Diff to events and passes every record
// on. Create it with New.
type Differ struct {
	next record.Sink
	opt  Options
	// last holds each object's last version, by key; order lists the
	// keys from the first remembered to the last, so that forgetting
	// the oldest, or any, takes constant time.
	last  map[string]*list.Element // of *kept
	order *list.List
	bytes int
}

// kept is one object's last version (cleaned JSON) under its key.
type kept struct {
	key string
	obj []byte
}

// New returns a Differ passing records on to next.
func New(next record.Sink, opt Options) *Differ {
	return &Differ{next: next, opt: opt, last: map[string]*list.Element{}, order: list.New()}
}

// Flush flushes the next sink (record.Flusher).
func (d *Differ) Flush() { record.Flush(d.next) }

// Emit diffs events against the last version of their object, then passes r on.
func (d *Differ) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Event:
		d.event(v)
	case *record.List:
		// A LIST gives every object's current version: the first change a
		// watch then delivers has something to diff with.
		for _, o := range v.Objects {
			if cur, err := d.clean(o.JSON); err == nil {
				d.remember(d.key(nil, o.APIVersion, o.Kind, o.Namespace, o.Name, o.UID), cur)
			}
		}
	}
	d.next.Emit(r)
}

func (d *Differ) key(c *record.Conn, apiVersion, kind, ns, name, uid string) string {
	k := apiVersion + "/" + kind + "/" + ns + "/" + name + "/" + uid
	if d.opt.PerConnection && c != nil {
		k = fmt.Sprint(c.ID) + "/" + k
	}
	return k
}

func (d *Differ) event(e *record.Event) {
	switch e.Type {
	case "ADDED", "MODIFIED", "DELETED":
	default:
		return
	}
	key := d.key(e.Conn, e.APIVersion, e.Kind, e.Namespace, e.Name, e.UID)
	cur, err := d.clean(e.Object)
	if err != nil {
		return
	}
	if el, ok := d.last[key]; ok && e.Type != "ADDED" {
		prev := el.Value.(*kept).obj
		if patch, err := jsonpatch.CreateMergePatch(prev, cur); err == nil {
			e.Diff = patch
			e.Changes = Changes(prev, patch)
		}
	}
	if e.Type == "DELETED" {
		d.forget(key)
		return
	}
	d.remember(key, cur)
}

// clean returns the object without the noise fields.
func (d *Differ) clean(obj []byte) ([]byte, error) {
	if d.opt.All {
		return obj, nil
	}
	var m map[string]any
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	for _, path := range NoiseFields {
		cur := m
		for i, k := range path {
			if i == len(path)-1 {
				delete(cur, k)
				break
			}
			next, ok := cur[k].(map[string]any)
			if !ok {
				break
			}
			cur = next
		}
	}
	return json.Marshal(m)
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

// Changes lists a merge patch's changes against the old version as lines:
// "~ data.k: "v1" → "v2"", "+ metadata.labels.app: "web"", "- data.x: "1"".
// Values longer than 60 bytes are cut.
func Changes(old, patch []byte) []string {
	var o, p map[string]any
	if json.Unmarshal(old, &o) != nil || json.Unmarshal(patch, &p) != nil {
		return nil
	}
	var out []string
	walk(o, p, "", &out)
	return out
}

func walk(old, patch map[string]any, prefix string, out *[]string) {
	keys := make([]string, 0, len(patch))
	for k := range patch {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		seg := k
		if strings.ContainsAny(k, ".[]\" ") || k == "" {
			seg = "[" + strconv.Quote(k) + "]"
		} else if prefix != "" {
			seg = "." + k
		}
		path := prefix + seg
		nv := patch[k]
		ov, had := old[k]
		switch {
		case nv == nil:
			*out = append(*out, fmt.Sprintf("- %s: %s", path, short(ov)))
		case !had:
			*out = append(*out, fmt.Sprintf("+ %s: %s", path, short(nv)))
		default:
			om, ok1 := ov.(map[string]any)
			nm, ok2 := nv.(map[string]any)
			if ok1 && ok2 {
				walk(om, nm, path, out)
				continue
			}
			*out = append(*out, fmt.Sprintf("~ %s: %s → %s", path, short(ov), short(nv)))
		}
	}
}

func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	s := string(b)
	if len(s) > 60 {
		cut := 57
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // do not split a character
		}
		s = s[:cut] + "…"
	}
	return strings.ReplaceAll(s, "\n", `\n`)
}
