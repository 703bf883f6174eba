package exchange

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/inflate"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// IsWatchRequest reports whether a request target asks for a watch: a
// "watch" query parameter of "true" or "1", or a path with a "/watch/"
// segment (the deprecated watch paths), following the Kubernetes API
// concepts: efficient detection of changes.
func IsWatchRequest(target string) bool {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return false
	}
	switch strings.ToLower(u.Query().Get("watch")) {
	case "true", "1":
		return true
	}
	return strings.Contains(u.Path, "/watch/")
}

// WatchState reports what a watch request's target gets first.
// startsWithState: the current state as ADDED events, with or without a
// bookmark saying where they end (sendInitialEvents=true, or no
// resourceVersion or "0"; semantics for watch: "Get State and Start at Most
// Recent" / "Any"). initialState: the state ended by an initial-events-end
// bookmark, so its events can be marked: sendInitialEvents=true (a
// watch-list, Kubernetes API concepts: streaming lists), or
// allowWatchBookmarks=true with no resourceVersion or "0" (the 1.37 API
// server then ends them with the bookmark too). A watch from no
// resourceVersion without bookmarks starts with the state, but nothing on
// the wire says where it ends.
func WatchState(target string) (startsWithState, initialState bool) {
	u, err := url.Parse(target)
	if err != nil {
		return false, false
	}
	q := u.Query()
	rv := q.Get("resourceVersion")
	sent := q.Get("sendInitialEvents") == "true"
	fromNow := rv == "" || rv == "0"
	return sent || fromNow, sent || (q.Get("allowWatchBookmarks") == "true" && fromNow)
}

// ContentCoding returns the content codings of a Content-Encoding field's
// values as one list ("gzip", "gzip, br"), or "" for none or identity
// (RFC 9110 §8.4).
func ContentCoding(values []string) string {
	enc := strings.TrimSpace(strings.Join(values, ", "))
	if enc == "" || strings.EqualFold(enc, "identity") {
		return ""
	}
	return enc
}

// WatchBody is how a 2xx response's body is followed as a watch: the one
// set of rules for HTTP/1.1 bodies and HTTP/2 streams alike (Kubernetes API
// concepts: efficient detection of changes, streaming lists).
type WatchBody struct {
	// Format is the watch events' serialization, from the media type.
	Format event.Format
	// Tentative: the request was not seen, so only the first event can
	// confirm it is a watch (carrier.Body.SetTentative).
	Tentative bool
	// Initial: the request asked for the initial state ended by a
	// bookmark (record.Request.InitialState).
	Initial bool
	// Secrets: the events are Secrets by where they come from
	// (record.Request.Secrets).
	Secrets bool
	// OtherResource: the request's path names a resource other than
	// secrets (record.Request.OtherResource).
	OtherResource bool
	// Coding is the content coding to inflate before framing ("" for
	// none; one inflate.Supported accepts).
	Coding string
}

// Start makes the carrier.Body that follows the watch: env, opt, attach,
// conn, exchange and direction as carrier.New takes them, t when the body
// starts. It returns nil when the body cannot be inflated (the Body has
// reported why).
func (w WatchBody) Start(env carrier.Env, opt carrier.Options, attach carrier.AttachFunc, conn *record.Conn, exchange int, direction string, t time.Time) *carrier.Body {
	b := carrier.New(env, opt, attach, conn, exchange, direction, w.Format, t)
	b.SetSecrets(w.Secrets)
	b.SetOtherResource(w.OtherResource)
	if w.Tentative {
		b.SetTentative()
	}
	b.SetInitial(w.Initial)
	if w.Coding != "" && !b.StartInflate(w.Coding) {
		return nil
	}
	return b
}

// UnsupportedCoding reports whether a watch body of content coding enc
// ("" for none) cannot be inflated, so that its carriers are listed and its
// events not decoded.
func UnsupportedCoding(enc string) bool {
	return enc != "" && !inflate.Supported(enc)
}

// UnsupportedCodingDetail is the detail of the warning about a watch body
// in content coding enc that kwatch does not inflate; carriers names what
// is still listed ("chunks", "DATA frames").
func UnsupportedCodingDetail(enc, carriers string) string {
	return "Content-Encoding: " + enc + "; " + carriers + " are listed, events are not decoded (kwatch inflates gzip and deflate)"
}

// KindContentCoded is the Problem kind (a warning) of a watch body whose
// coding kwatch does not undo.
const KindContentCoded = "content-encoded watch body"

// EndBody completes e, the End of a body, with what its watch events
// showed: whether it was still a watch, the count of events by type, what
// it inflated to, and the problems and warnings the events reported (added
// to e's own). ev may be nil (no events followed); it is closed at t.
func EndBody(e *record.End, ev *carrier.Body, t time.Time) {
	if ev == nil {
		return
	}
	ev.SetTime(t)
	ev.Close()
	e.Watch = ev.Watching()
	if e.Watch {
		e.Events = ev.Events()
	}
	e.Inflated, e.Members = ev.Inflated()
	p, w := ev.Counts()
	e.Problems += p
	e.Warnings += w
}

// EndStatus completes e with the Status of a non-2xx body kept in status
// (at most MaxStatusBody bytes) of media type contentType, or with the
// body's first bytes as text when it is not a Status.
func EndStatus(e *record.End, contentType string, status []byte) {
	if len(status) == 0 {
		return
	}
	e.Status = DecodeStatus(contentType, status)
	if e.Status == nil {
		e.BodyText = phrase.Clip(string(status), 80)
	}
}

// DecodeStatus decodes a metav1.Status body (JSON, possibly pretty-printed
// over several lines, protobuf or CBOR) of media type ct; nil when it is
// not one.
func DecodeStatus(ct string, data []byte) *metav1.Status {
	switch f, ok := event.FormatForContentType(ct); {
	case ok && f == event.FormatProtobuf:
		return event.DecodeStatusProtobuf(data)
	case ok && f == event.FormatCBOR:
		return event.DecodeStatusCBOR(data)
	}
	var st metav1.Status
	if err := json.Unmarshal(data, &st); err != nil || st.Kind != "Status" {
		return nil
	}
	return &st
}

// WatchOf decides whether a 2xx response of media type contentType that
// answers req (nil when the request was not seen) is followed as a watch,
// and in which format. A response whose request was seen is a watch when
// the request asked for one; one whose request was not seen may be a watch
// when its media type is one kube-apiserver answers a watch with and its
// body can stream (streams: HTTP/1.1 chunked coding or "stream=watch" in
// the media type; every HTTP/2 stream can), and is then tentative: its
// first event confirms it (carrier.Body.HoldResponse). The media types of
// a watch (kube-apiserver's serializers, as WatchMediaType says): protobuf
// with the parameter stream=watch (a plain protobuf object has none),
// CBOR as a sequence (application/cbor-seq; application/cbor is one
// object), JSON with no "as" parameter naming a list (as=Table is a watch
// of rows; as=APIGroupDiscoveryList or as=PartialObjectMetadataList is
// not).
func WatchOf(req *record.Request, contentType string, streams bool) (f event.Format, watch, tentative bool) {
	f, ok := event.FormatForContentType(contentType)
	switch {
	case !ok:
		return f, false, false
	case req != nil:
		return f, req.Watch, false
	case streams && WatchMediaType(contentType):
		return f, true, true
	}
	return f, false, false
}

// WatchMediaType reports whether contentType, a Kubernetes media type
// (event.FormatForContentType), can be that of a watch's response when
// nothing else says so (see WatchOf): protobuf only with stream=watch,
// CBOR only as application/cbor-seq, JSON unless its "as" parameter names
// a list kind.
func WatchMediaType(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch mt {
	case event.MediaProtobuf:
		return params["stream"] == "watch"
	case event.MediaCBOR:
		return false
	case event.MediaJSON:
		return !strings.HasSuffix(params["as"], "List")
	}
	return true
}

// StartOfBody reports what a watch body whose headers were not seen (an
// HTTP/2 stream joined in the middle of a connection, or a response whose
// header block could not be decoded) carries, from data that start a
// carrier (a DATA frame's data): the events' format (event.StartFormat)
// and the content coding, "gzip" when data starts a gzip member (RFC 1952
// §2.3: 1f 8b, then CM 8, deflate) whose first inflated bytes start an
// event; kube-apiserver flushes one whole member per flush, so a member
// starts a frame. ok is false when data starts neither: the middle of an
// event or of a member, or a body that is not a watch.
func StartOfBody(data []byte) (f event.Format, coding string, ok bool) {
	if f, ok := event.StartFormat(data); ok {
		return f, "", true
	}
	if !bytes.HasPrefix(data, []byte{0x1f, 0x8b, 0x08}) {
		return 0, "", false
	}
	// Inflate the first bytes only: enough for any format's start
	// (protobuf's is the longest, at most 31 bytes with its magic).
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, "", false
	}
	var head [startPeek]byte
	n, _ := io.ReadFull(zr, head[:])
	if f, ok := event.StartFormat(head[:n]); ok {
		return f, "gzip", true
	}
	return 0, "", false
}

// MediaType is the media type kube-apiserver answers a watch of format f
// with (the Content-Type of a response whose headers were not seen):
// application/vnd.kubernetes.protobuf;stream=watch,
// application/cbor-seq, or application/json.
func MediaType(f event.Format) string {
	switch f {
	case event.FormatProtobuf:
		return event.MediaProtobuf + ";stream=watch"
	case event.FormatCBOR:
		return event.MediaCBORSeq
	}
	return event.MediaJSON
}

// startPeek is how many inflated bytes StartOfBody looks at.
const startPeek = 64
