package event

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"
)

// Media types of watch bodies (Kubernetes API concepts: alternate
// representations of resources).
const (
	MediaJSON     = "application/json"
	MediaProtobuf = "application/vnd.kubernetes.protobuf"
	// MediaCBOR is what a client asks for (Accept) to get CBOR; the API
	// server answers a watch with MediaCBORSeq (KEP-4222).
	MediaCBOR    = "application/cbor"
	MediaCBORSeq = "application/cbor-seq"
)

// FormatForContentType returns the Format of a watch body from its
// Content-Type header value: JSON for application/json (with or without
// ";stream=watch"), Protobuf for application/vnd.kubernetes.protobuf, CBOR
// for application/cbor-seq and application/cbor. ok is false for any other
// media type.
func FormatForContentType(ct string) (f Format, ok bool) {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	}
	switch mt {
	case MediaJSON:
		return FormatJSON, true
	case MediaProtobuf:
		return FormatProtobuf, true
	case MediaCBORSeq, MediaCBOR:
		return FormatCBOR, true
	}
	return 0, false
}

// Event is one decoded watch event (metav1.WatchEvent) with the object's
// identity pulled out for printing.
type Event struct {
	// Type is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, as sent.
	Type string
	// Object is the event's object as JSON: for JSON watches the bytes
	// exactly as sent (Secret data redacted unless asked not to), for
	// protobuf and CBOR watches the decoded object marshalled to JSON (for
	// CBOR, a type this build does not know is decoded as unstructured
	// data, its keys then sorted), or for a protobuf type this build does
	// not know, a JSON object holding its apiVersion, kind and raw size.
	Object json.RawMessage
	// APIVersion and Kind name the object's type.
	APIVersion, Kind string
	// Namespace and Name identify the object; empty for cluster-scoped
	// objects or for a BOOKMARK/ERROR.
	Namespace, Name string
	// UID is metadata.uid.
	UID string
	// ResourceVersion is metadata.resourceVersion (for a BOOKMARK, the
	// version the watch has reached).
	ResourceVersion string
	// InitialEventsEnd is true on a BOOKMARK annotated
	// "k8s.io/initial-events-end: true" (Kubernetes API concepts: streaming
	// lists).
	InitialEventsEnd bool
	// RowKind is set when the object is a meta.k8s.io Table (what kubectl
	// get -w asks for): the kind of its row's object, PartialObjectMetadata
	// unless the rows include whole objects; Namespace, Name and UID are
	// then the row object's (Kubernetes API concepts: receiving resources
	// as Tables).
	RowKind string
	// Status is set for ERROR events whose object is a metav1.Status.
	Status *metav1.Status
	// Redacted is true when Secret values were replaced in Object.
	Redacted bool
	// NotObject is the JSON type of an object that is not a JSON object:
	// "number", "string", "boolean" or "array" (kubernetes-client/python's
	// watch tests send such events; no client decodes them as Kubernetes
	// objects). Object is then the value as sent, except what redactValue
	// redacts: in a watch of secrets its numbers, strings and booleans, and
	// always the objects an array holds (as objects are) and a string that
	// holds a JSON object or array. "" for an object (or null).
	NotObject string

	// kinds is what any reading of the object's kind says it may be
	// (objectMeta.Kinds); rowsSecret is set when a Table's rows may hold
	// a Secret (fromTableRows). Either makes Decode redact the object
	// unless ShowSecrets.
	kinds      kindFlags
	rowsSecret bool
	// asSecret: the event is of a watch of secrets (DecodeOptions.AsSecret):
	// the objects of its Table rows are redacted as Secrets too.
	asSecret bool
	// depth is how deep this object is nested in the event's object, for
	// redaction (maxRedactDepth); 0 for the event's object.
	depth int
	// kindless: no reading of the object's kind says anything (no "kind"
	// key in any letter case, or an empty one); kinds then holds
	// kindSecret, unless the request's path names what the object is
	// (DecodeOptions.OtherResource).
	kindless bool
}

// mayHoldSecret reports whether the object may hold a Secret's values and
// is to be redacted: a Secret, a PartialObjectMetadata, a list or a
// WatchEvent by any reading of its kind, a Table whose rows may hold one.
func (ev *Event) mayHoldSecret() bool {
	return ev.kinds&(kindSecret|kindMetadata|kindList|kindWatchEvent) != 0 || ev.rowsSecret
}

// DecodeOptions tune Decode.
type DecodeOptions struct {
	// ShowSecrets keeps the data and stringData of Secrets; by default
	// their values are replaced with "REDACTED".
	ShowSecrets bool
	// AsSecret redacts every object as a Secret, whatever its kind says
	// (and as what that kind says besides): the events of a watch of
	// secrets (SecretsPath).
	AsSecret bool
	// OtherResource: the events are of a request whose path names one
	// resource other than secrets (OtherResourcePath), so an object with
	// no kind is an object of that resource, not redacted as a Secret. An
	// object whose kind says Secret (or a list, a Table, …) is still
	// redacted as that kind says; AsSecret wins over it.
	OtherResource bool
}

// SecretsPath reports whether an HTTP request target may list or watch
// Secrets: a "secrets" segment in its path decoded and cleaned as a server
// reads it (%73ecrets and a/../secrets included), or a target that does
// not parse.
func SecretsPath(target string) bool {
	u, err := url.Parse(target)
	if err != nil {
		return true
	}
	return slices.Contains(strings.Split(path.Clean("/"+u.Path), "/"), "secrets")
}

// OtherResourcePath reports whether an HTTP request target names one API
// resource other than secrets, as kube-apiserver reads a path
// (/api/VERSION/… or /apis/GROUP/VERSION/…, the legacy /watch/ prefix, a
// namespace, then RESOURCE[/NAME]): the objects of its answer are of that
// resource, so one without a kind holds no Secret. It is false for a
// target that SecretsPath reports, a subresource (pods/NAME/log), and any
// other path (/healthz, /version, one that does not parse): redaction
// then fails closed.
func OtherResourcePath(target string) bool {
	if SecretsPath(target) {
		return false
	}
	u, err := url.Parse(target)
	if err != nil {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(path.Clean("/"+u.Path), "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return false
	}
	if len(parts) > 0 && parts[0] == "watch" {
		parts = parts[1:] // the deprecated /watch/ prefix (kube-apiserver's RequestInfoFactory)
	}
	// namespaces/NS/RESOURCE…, except namespaces/NS/status and
	// namespaces/NS/finalize, which are the namespace's subresources.
	if len(parts) > 2 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		parts = parts[2:]
	}
	return len(parts) >= 1 && len(parts) <= 2 && parts[0] != ""
}

// InitialEventsEndAnnotation marks the BOOKMARK that ends the initial events
// of a watch with sendInitialEvents=true.
const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

var (
	// jsonStream is apimachinery's JSON serializer as client-go's watch
	// decoder uses it. Its MetaFactory reads the event's own apiVersion and
	// kind (keys matched in any letter case) in an extra encoding/json pass:
	// client-go rejects an event with a kind that is not a string, or one
	// not registered. Only the events indexEvent leaves to it pay that
	// pass (it leaves it any event with such a key).
	jsonStream  = streamSerializer(runtime.ContentTypeJSON)
	protoStream = streamSerializer(runtime.ContentTypeProtobuf)
	// cborStream decodes a CBOR watch event as client-go's CBOR stream
	// serializer does (no transcoding: the object stays raw CBOR), and
	// cborObject the object in it (client-go: rest.Config's codec factory
	// with cbor.NewSerializerInfo).
	cborStream runtime.Decoder = cbor.NewSerializer(scheme.Scheme, scheme.Scheme, cbor.Transcode(false))
	cborObject runtime.Decoder = cbor.NewSerializer(scheme.Scheme, scheme.Scheme)
	universal                  = scheme.Codecs.UniversalDeserializer()
)

// streamSerializer returns the serializer client-go uses for watch events
// of a media type (rest/watch.NewDecoder's streaming decoder).
func streamSerializer(mediaType string) runtime.Decoder {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		panic("event: client-go scheme has no stream serializer for " + mediaType)
	}
	return info.StreamSerializer.Serializer
}

// Decode decodes one frame's bytes as a metav1.WatchEvent in format f, the
// way client-go's watch decoder does, and extracts the object's identity.
// It returns an error when the bytes are not a watch event.
func Decode(f Format, data []byte, opt DecodeOptions) (*Event, error) {
	if f == FormatJSON {
		if ev, ok, err := decodeIndexed(data, opt, nil); ok {
			return ev, err
		}
	}
	x, err := watchEvent(f, data)
	if err != nil {
		return nil, fmt.Errorf("not a watch event: %w", WithoutData(err))
	}
	return decodeFrom(f, x, opt)
}

// decodeIndexed is Decode for a JSON event real servers send, read in one
// pass without unmarshalling its object (indexEvent, which also lists the
// object's members and its metadata's); ok is false for any other event,
// which Decode leaves to apimachinery. With keep set, and only when it
// reads the event, it copies data into *keep and takes the event's object
// from that copy: a caller reading bytes it does not own copies only what
// turns out to be an event.
func decodeIndexed(data []byte, opt DecodeOptions, keep *[]byte) (ev *Event, ok bool, err error) {
	mp := memberPool.Get().(*memberArrays)
	defer memberPool.Put(mp)
	x, ok := indexEvent(data, mp.members[:0], mp.metas[:0])
	if !ok {
		return nil, false, nil
	}
	// Keep the arrays indexEvent grew for the next event.
	if cap(x.members) > cap(mp.members) {
		mp.members = x.members[:0]
	}
	if cap(x.metas) > cap(mp.metas) {
		mp.metas = x.metas[:0]
	}
	if keep != nil {
		*keep = bytes.Clone(data)
		x.doc = *keep
		if x.obj != nil {
			x.obj = (*keep)[x.objAt : x.objAt+len(x.obj)]
		}
	}
	ev, err = decodeFrom(FormatJSON, x, opt)
	return ev, true, err
}

// decodeFrom makes the Event of a watch event whose type and object x
// holds (with the object's members when x.indexed).
func decodeFrom(f Format, x eventIndex, opt DecodeOptions) (*Event, error) {
	if x.typ == "" {
		return nil, fmt.Errorf("not a watch event: no \"type\"")
	}
	ev := &Event{Type: x.typ}
	var err error
	switch f {
	case FormatProtobuf:
		err = ev.fromProtobuf(x.obj)
	case FormatCBOR:
		err = ev.fromCBOR(x.obj)
	default:
		err = ev.fromJSON(x.obj, &x)
	}
	// Redact before anything else sees the object, also when its metadata
	// did not decode: the event is still printed.
	// A PartialObjectMetadata (a metadata-only watch) may be a Secret's:
	// its last-applied-configuration annotation would hold the data.
	if ev.kindless && opt.OtherResource {
		// No kind, but the request's path says what the object is:
		// an object of a resource other than secrets.
		ev.kinds = 0
	}
	if opt.AsSecret {
		ev.kinds |= kindSecret
		ev.asSecret = true
	}
	switch {
	case opt.ShowSecrets:
	case ev.NotObject != "":
		ev.redactNotObject()
	case ev.mayHoldSecret():
		ev.redact()
	}
	return ev, err
}

// memberArrays are the arrays indexEvent lists an object's members and
// its metadata's in.
type memberArrays struct{ members, metas []member }

// memberPool holds memberArrays, reused from event to event: a member is
// offsets, so an array in the pool holds no event's bytes; each grows to
// what the events need, up to maxIndexedMembers and maxIndexedMetas.
var memberPool = sync.Pool{New: func() any {
	return &memberArrays{make([]member, 0, 16), make([]member, 0, 16)}
}}

// watchEvent returns the type and the object's bytes of the
// metav1.WatchEvent in data as apimachinery decodes it, as client-go's
// watch decoder does, or its error.
func watchEvent(f Format, data []byte) (eventIndex, error) {
	var we metav1.WatchEvent
	dec := jsonStream
	switch f {
	case FormatProtobuf:
		dec = protoStream
	case FormatCBOR:
		dec = cborStream
	}
	if _, _, err := dec.Decode(data, nil, &we); err != nil {
		return eventIndex{}, err
	}
	return eventIndex{typ: we.Type, obj: we.Object.Raw}, nil
}

// objectMeta is the part of an object kwatch prints.
type objectMeta struct {
	APIVersion, Kind                      string
	Name, Namespace, UID, ResourceVersion string
	// InitialEventsEnd is the InitialEventsEndAnnotation read as a bool.
	InitialEventsEnd bool
	// Kinds is what any top-level key that matches "kind" in any letter
	// case (a duplicate, one apimachinery would not use) says the object
	// may be, its value read in any letter case: redaction fails closed.
	Kinds kindFlags
	// Rows is the raw "rows" value of a Table (a string, so that
	// objectMeta stays comparable).
	Rows string
	// OtherRows is true when another member than the last "rows" matches
	// it: in another letter case, or an earlier duplicate (a client
	// ignores it; redaction checks it all the same).
	OtherRows bool
}

// fromJSON sets the event's object raw and the identity read from it
// (from the members x lists when x is not nil and x.indexed). Fields read
// before a metadata error are kept, and the error returned.
func (ev *Event) fromJSON(raw []byte, x *eventIndex) error {
	ev.Object = raw
	switch t := jsonType(raw); t {
	case "number", "string", "boolean", "array":
		// Nothing to read an identity from; shown as the value it is.
		ev.NotObject = t
		return nil
	}
	var m objectMeta
	var err error
	if x != nil && x.indexed {
		err = readMetaMembers(x, &m)
	} else {
		err = readMeta(raw, &m)
	}
	ev.APIVersion, ev.Kind = m.APIVersion, m.Kind
	ev.Namespace, ev.Name, ev.UID = m.Namespace, m.Name, m.UID
	ev.ResourceVersion = m.ResourceVersion
	ev.InitialEventsEnd = m.InitialEventsEnd
	ev.kinds = m.suspect(raw)
	ev.kindless = m.kindless(raw)
	// A Table's rows are looked at for Secrets also when its metadata
	// did not read: the event is printed all the same.
	if m.Kinds&kindTable != 0 && len(m.Rows) > 0 {
		ev.fromTableRows([]byte(m.Rows), err == nil && m.Kind == "Table" && strings.HasPrefix(m.APIVersion, "meta.k8s.io/"))
	}
	if m.Kinds&kindTable != 0 && m.OtherRows {
		ev.rowsSecret = true // rows no client reads may hold Secrets: redact fails closed
	}
	if err != nil {
		return fmt.Errorf("watch event object: %w", err)
	}
	if ev.Kind == "Status" {
		// Case-sensitive, as client-go decodes it: a "Code" beside
		// "code" is not the code.
		var st metav1.Status
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &st); err == nil {
			ev.Status = &st
		}
	}
	return nil
}

// fromTableRows takes the identity of a Table's object from its first row's
// "object", when identity (a meta.k8s.io Table: a watch event's Table has
// one row; the key matched case-sensitively, the last of duplicates, as
// client-go decodes it). A row member whose key is "object" in any letter
// case (every copy of a duplicate) and that may hold a Secret marks the
// event for redaction (redactTable redacts them all: it fails closed). The
// event was validated as JSON before: rows are walked, not parsed again.
func (ev *Event) fromTableRows(raw []byte, identity bool) {
	first := true
	err := eachElement(raw, func(row []byte) error {
		isFirst := first
		first = false
		if string(row) == "null" {
			return nil
		}
		return eachField(row, func(k, obj []byte) error {
			if !bytes.EqualFold(k, []byte("object")) || string(obj) == "null" {
				return nil
			}
			var m objectMeta
			_ = readMeta(obj, &m)
			if m.suspect(obj) != 0 {
				// A row's metadata may be a Secret's (kubectl get
				// secrets -w): its last-applied-configuration holds
				// the data; a row may also hold a Table or a list.
				ev.rowsSecret = true
			}
			if identity && isFirst && string(k) == "object" {
				ev.RowKind = m.Kind
				ev.Namespace, ev.Name, ev.UID = m.Namespace, m.Name, m.UID
			}
			return nil
		})
	})
	if err != nil {
		ev.rowsSecret = true // rows that cannot be read: redactTable replaces them (fails closed)
	}
}

// protobufMagic starts every object encoded by apimachinery's protobuf
// serializer.
var protobufMagic = []byte("k8s\x00")

func (ev *Event) fromProtobuf(raw []byte) error {
	obj, gvk, err := universal.Decode(raw, nil, nil)
	if err != nil {
		// A type this build does not know: read the runtime.Unknown
		// envelope for its apiVersion and kind.
		var unk runtime.Unknown
		if bytes.HasPrefix(raw, protobufMagic) && unk.Unmarshal(raw[len(protobufMagic):]) == nil {
			// What metadata informers ask for (as=PartialObjectMetadata):
			// meta.k8s.io's types are not in the client scheme, but their
			// protobuf messages are known.
			if unk.Kind == "PartialObjectMetadata" && strings.HasPrefix(unk.APIVersion, "meta.k8s.io/") {
				var pom metav1.PartialObjectMetadata
				if pom.Unmarshal(unk.Raw) == nil {
					gv, _ := schema.ParseGroupVersion(unk.APIVersion)
					gk := gv.WithKind(unk.Kind)
					pom.SetGroupVersionKind(gk)
					ev.setFromObject(&pom, &gk)
					if js, err := json.Marshal(&pom); err == nil {
						ev.Object = js
						return nil
					}
				}
			}
			ev.APIVersion, ev.Kind = unk.APIVersion, unk.Kind // its bytes are not shown: nothing to redact
			ev.Object, _ = json.Marshal(map[string]any{
				"apiVersion": unk.APIVersion, "kind": unk.Kind, "rawBytes": len(unk.Raw),
			})
			return nil
		}
		if !bytes.HasPrefix(raw, protobufMagic) && !runtime.IsMissingKind(err) && !runtime.IsMissingVersion(err) {
			// apimachinery read it as JSON or YAML, whose errors quote
			// the values they could not read (a Secret's too).
			return fmt.Errorf("watch event object: not protobuf (no %q prefix), and not an object apimachinery reads as JSON or YAML", protobufMagic)
		}
		return fmt.Errorf("watch event object: %w", WithoutData(err))
	}
	if gvk != nil {
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
	}
	ev.setFromObject(obj, gvk)
	js, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("watch event object to JSON: %w", err)
	}
	ev.Object = js
	return nil
}

// fromCBOR decodes a CBOR watch event's object with apimachinery's CBOR
// serializer, into its Go type when the client scheme knows it and as
// unstructured data otherwise (custom resources, meta.k8s.io's Table), and
// reads it as JSON.
func (ev *Event) fromCBOR(raw []byte) error {
	obj, gvk, err := cborObject.Decode(raw, nil, nil)
	if err != nil {
		u := &unstructured.Unstructured{}
		if _, _, uerr := cborObject.Decode(raw, nil, u); uerr != nil {
			return fmt.Errorf("watch event object: %w", WithoutData(err))
		}
		obj, gvk = u, nil
	}
	if gvk != nil {
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
	}
	js, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("watch event object to JSON: %w", err)
	}
	return ev.fromJSON(js, nil)
}

func (ev *Event) setFromObject(obj runtime.Object, gvk *schema.GroupVersionKind) {
	if gvk != nil {
		ev.APIVersion, ev.Kind = gvk.GroupVersion().String(), gvk.Kind
		ev.kinds = kindFlagsOf(gvk.Kind)
	}
	if st, ok := obj.(*metav1.Status); ok {
		ev.Status = st
		return
	}
	if acc, ok := obj.(metav1.Object); ok {
		ev.Namespace, ev.Name, ev.UID = acc.GetNamespace(), acc.GetName(), string(acc.GetUID())
		ev.ResourceVersion = acc.GetResourceVersion()
		ev.InitialEventsEnd = acc.GetAnnotations()[InitialEventsEndAnnotation] == "true"
	}
}

// Redacted starts the value that replaces Secret data (see redactedJSON).
const Redacted = "REDACTED"

// RedactObject returns obj (an object as JSON) with the data of a Secret
// replaced as Decode does unless ShowSecrets (as what any reading of its
// kind says it is, and as a Secret when no kind can be read: it fails
// closed); other objects are returned as they are.
func RedactObject(obj []byte) []byte { return redactObject(obj, 0, false) }

// maxRedactDepth bounds how deep redaction looks into objects nested in
// objects (a Table row's, a list's items, a WatchEvent's): each level walks
// what it holds, so an event nested deeper than real ones are would cost
// its size times its depth. Deeper objects are replaced whole.
const maxRedactDepth = 16

// redactObject is RedactObject for an object nested depth levels deep in
// the event's object, redacted as a Secret too when asSecret; null is kept.
func redactObject(obj []byte, depth int, asSecret bool) []byte {
	if string(bytes.TrimSpace(obj)) == "null" {
		return obj
	}
	if depth > maxRedactDepth {
		return redactedJSON(obj)
	}
	var m objectMeta
	_ = readMeta(obj, &m)
	kinds := m.suspect(obj)
	if asSecret {
		kinds |= kindSecret
	}
	if kinds == 0 {
		return obj
	}
	ev := &Event{Object: obj, Kind: m.Kind, APIVersion: m.APIVersion, Name: m.Name, Namespace: m.Namespace, kinds: kinds, depth: depth}
	ev.redact()
	return ev.Object
}

// secretAnnotations are annotations that may hold a copy of a Secret's
// data: kubectl apply keeps the whole applied object in
// last-applied-configuration.
var secretAnnotations = []string{"kubectl.kubernetes.io/last-applied-configuration"}

// redact rewrites a Secret's object with the values of data and
// stringData, and of annotations that copy them, replaced by Redacted. It
// fails closed: every copy of a duplicated key is redacted (encoding/json
// merges duplicate objects, so an earlier copy may be the data client-go
// sees), keys match in any letter case, and an object it cannot read is
// replaced whole.
//
// What any reading of its kind says it may be is redacted, each in turn: a
// Table's rows, a list's items, and the object's own data, stringData and
// annotations when it may be a Secret or a PartialObjectMetadata.
func (ev *Event) redact() {
	if ev.kinds&kindTable != 0 {
		ev.redactTable()
	}
	if ev.kinds&kindList != 0 {
		ev.redactMembers("items", true)
	}
	if ev.kinds&kindWatchEvent != 0 {
		ev.redactMembers("object", false)
	}
	if ev.kinds&(kindSecret|kindMetadata) == 0 {
		return
	}
	out, changed, err := redactSecret(ev.Object)
	if err != nil {
		ev.redactWhole()
		return
	}
	if changed {
		ev.Object = out
		ev.Redacted = true
	}
}

// redactWhole replaces an object that may hold a Secret and could not be
// read to redact it.
func (ev *Event) redactWhole() {
	ev.Object, _ = json.Marshal(map[string]any{"kind": ev.Kind, "apiVersion": ev.APIVersion,
		"metadata": map[string]any{"name": ev.Name, "namespace": ev.Namespace},
		"data":     Redacted + " (the object could not be read to redact it)"})
	ev.Redacted = true
}

// redactNotObject redacts an event's object that is not a JSON object
// (NotObject): a number, string or boolean cannot hold a Secret's data,
// and is kept as sent, except in a watch of secrets (everything there is
// a Secret's: it is redacted); the objects an array holds are redacted as
// objects are (redactValue).
func (ev *Event) redactNotObject() {
	out := redactValue(ev.Object, 0, ev.asSecret)
	if !bytes.Equal(out, ev.Object) {
		ev.Object = out
		ev.Redacted = true
	}
}

// redactValue returns the JSON value v, depth levels deep in an event's
// object, redacted: an object as redactObject redacts it, an array
// element by element, null as it is, and a number, string or boolean as it
// is unless asSecret (then as a Secret's value, redactedJSON). A string
// whose text is a JSON object or array (a Secret sent as a string) is
// redacted as that value, and stays a string. An array deeper than
// maxRedactDepth, or one that does not read, is replaced whole.
func redactValue(v []byte, depth int, asSecret bool) []byte {
	switch jsonType(v) {
	case "string":
		if asSecret {
			return redactedJSON(v)
		}
		var text string
		if json.Unmarshal(v, &text) != nil {
			return redactedJSON(v)
		}
		if t := jsonType([]byte(text)); (t == "object" || t == "array") && json.Valid([]byte(text)) {
			if r := redactValue([]byte(text), depth+1, false); r != nil && string(r) != text {
				out, _ := json.Marshal(string(r))
				return out
			}
		}
		return v
	case "object":
		return redactObject(v, depth, asSecret)
	case "array":
		if depth > maxRedactDepth {
			return redactedJSON(v)
		}
		out, changed, err := rewriteArray(v, func(e []byte) ([]byte, error) { return redactValue(e, depth+1, asSecret), nil })
		switch {
		case err != nil:
			return redactedJSON(v)
		case changed:
			return out
		}
		return v
	case "null":
		return v
	}
	if asSecret {
		return redactedJSON(v)
	}
	return v
}

// jsonType names the type of the JSON value v by its first byte:
// "object", "array", "string", "number", "boolean" or "null"; "" for
// bytes that start no JSON value.
func jsonType(v []byte) string {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return ""
	}
	switch c := v[0]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	}
	return ""
}

// redactMembers redacts what the object's members named key in any letter
// case (every copy) hold, as Secrets (redactObject): the items of a list
// (array, each element), or the object of a WatchEvent (not array). The
// container's type, not an element's own kind, is what a client decodes an
// element as (a SecretList's items are Secrets whatever they say), so every
// element is redacted as a Secret would be. An object that is not an object
// is replaced whole; members of another shape are left as they are (no
// client reads objects from them).
func (ev *Event) redactMembers(key string, array bool) {
	out, changed, err := rewriteMembers(ev.Object, key, func(v []byte) []byte {
		if !array {
			return redactObject(v, ev.depth+1, true)
		}
		items, itemsChanged, err := rewriteArray(v, func(item []byte) ([]byte, error) { return redactObject(item, ev.depth+1, true), nil })
		if err != nil || !itemsChanged {
			return v
		}
		return items
	})
	switch {
	case err != nil:
		ev.redactWhole()
	case changed:
		ev.Object = out
		ev.Redacted = true
	}
}

// RedactSecretObject returns obj (an object as JSON) redacted as a Secret
// is, whatever its kind says, and as what that kind says besides: for an
// object known to be a Secret by where it came from (a LIST of secrets).
func RedactSecretObject(obj []byte) []byte { return redactObject(obj, 0, true) }

// redactKey keys the tags of redacted values; it is made afresh for each
// run and never shown.
var redactKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // crypto/rand.Read does not fail (Go 1.24)
	return k
}()

// redactedJSON returns what replaces the JSON value v of a Secret: the
// string Redacted followed by 8 hex digits of HMAC-SHA-256 of v under
// redactKey. The tag changes when the value changes, so --diff shows that a
// Secret's value changed; with a key made afresh for each run it tells
// nothing else about the value (RFC 2104). "REDACTED" and hex digits are
// base64 characters, so the value is still valid base64 data.
func redactedJSON(v []byte) []byte {
	m := hmac.New(sha256.New, redactKey)
	m.Write(v)
	return fmt.Appendf(nil, `"%s%x"`, Redacted, m.Sum(nil)[:4])
}

// redactTable redacts the Secrets a Table's rows include whole; a Table it
// cannot read is replaced whole (it fails closed, as redact does). The rows,
// and their objects, are found under any letter case and in every copy of a
// duplicated key: a client reads only the last "rows" and "object", but the
// printed bytes show them all. A Table with nothing to redact keeps its
// bytes as sent; one with something keeps its members' order and copies.
func (ev *Event) redactTable() {
	found, unreadable := false, false
	out, changed, err := rewriteMembers(ev.Object, "rows", func(v []byte) []byte {
		if found = true; string(v) == "null" {
			return v
		}
		rows, rowsChanged, err := redactRows(v, ev.depth+1, ev.asSecret)
		switch {
		case err != nil:
			unreadable = true
		case rowsChanged:
			return rows
		}
		return v
	})
	if err != nil || unreadable || !found {
		// Unreadable, or no rows to redact: what may hold a Secret is
		// unknown.
		ev.redactTableWhole()
		return
	}
	if !changed {
		return // the bytes as sent
	}
	ev.Redacted = true
	ev.Object = out
}

// redactRows returns a Table's rows (a JSON array of objects, or nulls)
// with the value of every member whose key is "object" in any letter case
// passed through redactObject (depth levels deep; as a Secret too when
// asSecret: the rows of a watch of secrets), and whether one changed; an
// error when rows is not such an array.
func redactRows(rows []byte, depth int, asSecret bool) (out []byte, changed bool, err error) {
	return rewriteArray(rows, func(row []byte) ([]byte, error) {
		if string(row) == "null" {
			return row, nil
		}
		r, _, err := rewriteMembers(row, "object", func(obj []byte) []byte { return redactObject(obj, depth, asSecret) })
		return r, err
	})
}

// rewriteMembers returns obj with the value of every member whose key is
// key in any letter case (every copy of a duplicate) replaced by fn(value),
// and whether one changed; obj itself, its bytes as sent, when none did. It
// returns an error when obj is not an object (see rewriteObject).
func rewriteMembers(obj []byte, key string, fn func(value []byte) []byte) (out []byte, changed bool, err error) {
	out, err = rewriteObject(obj, func(k, v []byte) []byte {
		if !bytes.EqualFold(k, []byte(key)) {
			return v
		}
		r := fn(v)
		changed = changed || !bytes.Equal(r, v)
		return r
	})
	if err != nil || !changed {
		return obj, false, err
	}
	return out, true, nil
}

// rewriteArray returns the JSON array arr with each element replaced by
// fn(element), and whether an element changed; an error when arr is not an
// array, or fn's first error.
func rewriteArray(arr []byte, fn func(elem []byte) ([]byte, error)) (out []byte, changed bool, err error) {
	out = append(make([]byte, 0, len(arr)+64), '[')
	err = eachElement(arr, func(e []byte) error {
		if len(out) > 1 {
			out = append(out, ',')
		}
		r, err := fn(e)
		if err != nil {
			return err
		}
		changed = changed || !bytes.Equal(r, e)
		out = append(out, r...)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return append(out, ']'), changed, nil
}

// redactTableWhole replaces a Table that may hold Secrets and could not be
// read whole.
func (ev *Event) redactTableWhole() {
	ev.Object, _ = json.Marshal(map[string]any{"kind": "Table", "apiVersion": ev.APIVersion,
		"rows": Redacted + ": a Table whose rows may hold Secrets and could not be read"})
	ev.Redacted = true
}

// redactSecret returns obj rewritten by redact's rules, and whether a
// value was replaced; an error when obj is not a JSON object.
func redactSecret(obj []byte) (out []byte, changed bool, err error) {
	out, err = rewriteObject(obj, func(key, v []byte) []byte {
		switch {
		case bytes.EqualFold(key, []byte("data")), bytes.EqualFold(key, []byte("stringData")):
			return redactValues(v, &changed)
		case bytes.EqualFold(key, []byte("metadata")):
			md, err := rewriteObject(v, func(key, v []byte) []byte {
				if !bytes.EqualFold(key, []byte("annotations")) {
					return v
				}
				ann, err := rewriteObject(v, func(key, v []byte) []byte {
					for _, a := range secretAnnotations {
						if bytes.EqualFold(key, []byte(a)) && string(v) != "null" {
							changed = true
							return redactedJSON(v)
						}
					}
					return v
				})
				if err != nil && string(v) != "null" {
					changed = true
					return redactedJSON(v) // annotations that cannot be read
				}
				return ann
			})
			switch {
			case err != nil && string(v) == "null":
				return v
			case err != nil:
				// Not an object (client-go cannot decode the Secret),
				// but the output shows what it holds: replaced whole.
				changed = true
				return redactedJSON(v)
			}
			return md
		}
		return v
	})
	return out, changed, err
}

// redactValues returns the value of a data or stringData field with every
// value replaced: an object keeps its keys, null stays null, and anything
// else becomes Redacted.
func redactValues(v []byte, changed *bool) []byte {
	if string(v) == "null" {
		return v
	}
	out, err := rewriteObject(v, func(_, v []byte) []byte {
		*changed = true
		return redactedJSON(v)
	})
	if err != nil {
		*changed = true
		return redactedJSON(v)
	}
	return out
}

// rewriteObject returns the JSON object obj with each value replaced by
// fn(key, value), keys re-encoded from their unescaped form, in order and
// with duplicates kept; an error when obj is not an object.
func rewriteObject(obj []byte, fn func(key, value []byte) []byte) ([]byte, error) {
	out := append(make([]byte, 0, len(obj)+16), '{')
	err := eachField(obj, func(key, v []byte) error {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = appendKey(out, key)
		out = append(out, ':')
		out = append(out, fn(key, v)...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(out, '}'), nil
}

// appendKey appends key (escapes undone) to out as encoding/json encodes a
// string: as it is when it is printable ASCII with nothing to escape (no
// quote, backslash, or the <, > and & that json.Marshal escapes), else
// through json.Marshal.
func appendKey(out, key []byte) []byte {
	for _, c := range key {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			k, _ := json.Marshal(string(key))
			return append(out, k...)
		}
	}
	out = append(out, '"')
	out = append(out, key...)
	return append(out, '"')
}

// WithoutData returns err without the object apimachinery quotes in it:
// its "Object 'Kind' is missing in '…'" and "Object 'apiVersion' is
// missing in '…'" errors (runtime.NewMissingKindErr, NewMissingVersionErr)
// hold the whole object, which may be a Secret's, and problems are printed.
// Wrapped in another error (client-go's), the text is cut where the quote
// begins; nil and other errors are returned as they are.
func WithoutData(err error) error {
	switch {
	case err == nil:
		return nil
	case runtime.IsMissingKind(err):
		return errors.New("object 'Kind' is missing")
	case runtime.IsMissingVersion(err):
		return errors.New("object 'apiVersion' is missing")
	}
	if msg := err.Error(); strings.Contains(msg, "' is missing in '") {
		return errors.New(msg[:strings.Index(msg, "' is missing in '")] + "' is missing")
	}
	return err
}

// DecodeStatusProtobuf decodes a protobuf-encoded metav1.Status body (as the
// API server sends for errors when protobuf was asked for); nil when data
// is not one.
func DecodeStatusProtobuf(data []byte) *metav1.Status {
	obj, _, err := universal.Decode(data, nil, nil)
	if err != nil {
		return nil
	}
	st, _ := obj.(*metav1.Status)
	return st
}

// DecodeStatusCBOR decodes a CBOR-encoded metav1.Status body (what the API
// server sends for errors when CBOR was asked for); nil when data is not
// one.
func DecodeStatusCBOR(data []byte) *metav1.Status {
	var st metav1.Status
	if _, _, err := cborObject.Decode(data, nil, &st); err != nil || st.Kind != "Status" {
		return nil
	}
	return &st
}

// OtherTypes is the key under which CountType counts the event types it
// does not name.
const OtherTypes = "(other types)"

// watchTypes are the watch event types (metav1.WatchEvent).
var watchTypes = map[string]bool{"ADDED": true, "MODIFIED": true, "DELETED": true, "BOOKMARK": true, "ERROR": true}

// CountType counts one event of type typ in counts, by name for the five
// watch event types and for up to 8 others of at most 32 bytes, and under
// OtherTypes beyond that: a stream of events with made-up types (a million
// of them, or one of 60 MiB) must not make the counts grow with it.
func CountType(counts map[string]int, typ string) {
	if _, ok := counts[typ]; !ok && !watchTypes[typ] {
		others := 0
		for t := range counts {
			if !watchTypes[t] && t != OtherTypes {
				others++
			}
		}
		if others >= 8 || len(typ) > 32 {
			typ = OtherTypes
		}
	}
	counts[typ]++
}
