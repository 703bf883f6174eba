// Package record defines what kwatch reports, in the order it happens on a
// connection: the HTTP/1.1 request and response of each exchange, every
// watch event with the chunks that carried it, problems with their location,
// and how each body and connection ended. Both subcommands produce these
// records (from a capture or from a live connection) and the printers
// consume them; the JSON Lines schema in README.md is their JSON form.
package record

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Record is any of the record types of this package.
type Record interface {
	// When returns the capture or arrival time the record refers to; zero
	// when none applies.
	When() time.Time
}

// ConnOf returns the connection record r is about: its Conn field for the
// records of one connection (Request, Response, Event, End, ConnNote,
// Problem, Health), nil for the others and for a Problem or Health
// of no connection.
func ConnOf(r Record) *Conn {
	if c, ok := r.(interface{ Connection() *Conn }); ok {
		return c.Connection()
	}
	return nil
}

// Key returns c's ID, or 0 for a nil Conn (a record of no connection).
func (c *Conn) Key() int {
	if c == nil {
		return 0
	}
	return c.ID
}

// Sink receives records in order. Implementations are printers; Emit must
// not keep pointers into the record after it returns unless it copies them.
type Sink interface {
	Emit(r Record)
}

// Flusher is a Sink that may hold what it was given (a printer holds
// output lines) until Flush. Producers flush before they wait for more
// input, so that what was decoded is shown before kwatch waits.
type Flusher interface {
	Flush()
}

// Flush flushes s if it is a Flusher.
func Flush(s Sink) {
	if f, ok := s.(Flusher); ok {
		f.Flush()
	}
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Record)

// Emit calls f(r).
func (f SinkFunc) Emit(r Record) { f(r) }

// Conn identifies a TCP connection by its client and server endpoints, as
// "client ip:port -> server ip:port" (IPv6 in brackets, RFC 3986 §3.2.2).
type Conn struct {
	// ID numbers connections from 1 in the order they were first seen.
	ID int
	// Client is the endpoint that sent the first request (or, when no
	// request was seen, the one that did not listen).
	Client netip.AddrPort
	// Server is the other endpoint.
	Server netip.AddrPort
	// RolesGuessed is true when which endpoint is the client could not
	// be decided (a connection the capture joined after its SYN, whose
	// first bytes say neither, between two ports of the ephemeral range):
	// Client is then the endpoint of the higher port.
	RolesGuessed bool
	// HTTP2 is true once the connection turned out to be HTTP/2 (set
	// before any record of its streams is emitted, never changed after):
	// its exchanges are streams, numbered by stream identifier.
	HTTP2 bool
	// Node is the Kubernetes node the connection was seen on, when kwatch
	// read it from kwatch running on that node (--node, pod/NAME); "" for
	// a connection seen by this kwatch itself.
	Node string
}

// String returns "client -> server", e.g. "127.0.0.1:55486 -> 127.0.0.1:8001".
func (c *Conn) String() string {
	if c == nil {
		return ""
	}
	return c.Client.String() + " -> " + c.Server.String()
}

// Request is an HTTP/1.1 request line and header section (RFC 9112 §3).
type Request struct {
	Conn *Conn
	// Exchange numbers the request/response exchanges of a connection from 1.
	Exchange int
	Time     time.Time
	Method   string
	Target   string
	Proto    string
	Header   map[string][]string
	// Watch is true when the request asks for a watch (watch=true|1 query
	// parameter or a /watch/ path).
	Watch bool
	// InitialState is true when a watch gets the current state as ADDED
	// events first: it asks sendInitialEvents=true (a watch-list), or no
	// resourceVersion or "0" (Kubernetes API concepts: semantics for
	// watch).
	InitialState bool
	// StartsWithState is true when the watch gets the current state as
	// ADDED events first, whether or not a bookmark will say where they
	// end: InitialState, or no resourceVersion or "0" without bookmarks.
	// Those events come in key order, not resourceVersion order (health
	// does not judge their order).
	StartsWithState bool
	// Secrets is true when the target may list or watch Secrets
	// (event.SecretsPath): the objects of its events are redacted as
	// Secrets whatever their kind says.
	Secrets bool
	// OtherResource is true when the target names one resource other
	// than secrets (event.OtherResourcePath): an object of its events
	// that has no kind is of that resource, not redacted as a Secret.
	OtherResource bool
	// Unknown lists the fields of an HTTP/2 request's header block that
	// could not be decoded because they refer to HPACK dynamic table
	// entries added before the capture joined the connection (see
	// UnknownField); nil when every field decoded. A pseudo-header among
	// them leaves its field empty: Method "" or Target "" means it was
	// not known, and Watch, InitialState, StartsWithState and Secrets
	// are then false.
	Unknown []UnknownField
	// Omitted is set by the follower when the filters leave out the
	// exchange the request opens (exchange.Limits.Omit: --user-agent,
	// --resource, -n): its response body is not framed into events.
	Omitted bool
}

// UnknownField is a field of an HTTP/2 header block (RFC 9113 §4.3) that
// could not be decoded: it refers to an entry of the HPACK dynamic table
// (RFC 7541 §2.3.2, §6.1, §6.2) that was added before the capture joined
// the connection, which kwatch never saw. Its name is therefore unknown,
// and never guessed; so is its value, unless the field gave it as a
// literal (or refers to an entry added since the join that did).
type UnknownField struct {
	// Position is the field's place in its header block, from 0.
	Position int `json:"position"`
	// Index is the HPACK index the field refers to (RFC 7541 §2.3.3:
	// above 61, the dynamic table's entries, newest first): for its whole
	// entry, or for its name only when the value is a literal.
	Index uint64 `json:"index"`
	// ValueBytes is the length in bytes of the field's value when the
	// value is known; -1 when it is not. The value itself is not kept: a
	// field whose name is unknown may be a credential (Authorization).
	ValueBytes int `json:"valueBytes"`
}

// When returns the time of the request's last header byte.
func (r *Request) When() time.Time { return r.Time }

// Connection returns the connection the record is about (nil: none).
func (r *Request) Connection() *Conn { return r.Conn }

// Response is an HTTP/1.1 status line and header section (RFC 9112 §4) with
// how its body is framed.
type Response struct {
	Conn       *Conn
	Exchange   int
	Time       time.Time
	Proto      string
	StatusCode int
	Reason     string
	Header     map[string][]string
	// Framing is "chunked", "content-length" (with ContentLength bytes),
	// "close" (read until the connection closes) or "none".
	Framing       string
	ContentLength int64
	ContentType   string
	// Watch is true when the exchange is a watch: from the request, or,
	// when the request was not captured, from the response.
	Watch bool
	// Format is "json" or "protobuf" for a watch body.
	Format string
	// ContentEncoding is the body's content coding (RFC 9110 §8.4), e.g.
	// "gzip"; empty for none. kwatch inflates gzip and deflate.
	ContentEncoding string
	// Request is the matching request's method, protocol and flags (its
	// target and header section are in the Request record emitted before),
	// nil when it was not captured.
	Request *Request
	// Inferred is set when the status line and the header fields that
	// say what the body is were not read but inferred from the body's
	// first bytes: an HTTP/1.1 capture that starts inside a response, an
	// HTTP/2 stream first seen by its DATA frames in a connection joined
	// mid-connection, a response whose header block could not be decoded
	// (HPACK out of step), or one whose Content-Type was an unknown field
	// (Unknown). StatusCode (200: the body holds watch events), Watch,
	// Format, ContentType and ContentEncoding are then what the data
	// show (pkg/exchange StartOfBody), not what the server said.
	Inferred bool
	// Unknown lists the fields of an HTTP/2 response's header block that
	// could not be decoded, as Request.Unknown does.
	Unknown []UnknownField
}

// When returns the time of the response's last header byte.
func (r *Response) When() time.Time { return r.Time }

// Connection returns the connection the record is about (nil: none).
func (r *Response) Connection() *Conn { return r.Conn }

// Chunk is one chunk of a body as on the wire (RFC 9112 §7.1).
type Chunk struct {
	// Index numbers the chunks of a body from 0.
	Index int `json:"index"`
	// Size is the chunk-size: data bytes in the chunk.
	Size int64 `json:"size"`
	// SizeLine is the chunk-size line as on the wire, without CRLF: hex
	// digits and any chunk-ext.
	SizeLine string `json:"sizeLine"`
	// Offset is the byte offset of the chunk's size line in the body.
	Offset int64 `json:"offset"`
	// Header is the size line with its line ending, as bytes (the wire
	// view prints them in hex).
	Header []byte `json:"-"`
	// Events is how many watch events have bytes in this chunk.
	Events int `json:"events,omitempty"`
	// Bytes is how many bytes of the event at hand the chunk carried
	// (inflated bytes for a gzip or deflate body).
	Bytes int64 `json:"bytes,omitempty"`
	// Inflated is how many bytes the chunk's compressed data inflated to,
	// as far as known when the event was emitted (gzip or deflate body).
	Inflated int64 `json:"inflated,omitempty"`
	// Ordinal is which of the chunk's events the event at hand is, from 1.
	Ordinal int `json:"-"`
	// DataAt is the offset of its first data byte in the body's data
	// (de-chunked, as Event.Offset), -1 in a compressed body; with Bytes
	// and Event.Offset it places an event among the others it carried.
	DataAt int64 `json:"-"`
}

// Frame is one HTTP/2 DATA frame that carried body bytes (RFC 9113 §6.1).
type Frame struct {
	// Stream is the frame's stream identifier.
	Stream uint32 `json:"stream"`
	// Index numbers the DATA frames of the stream from 0.
	Index int `json:"index"`
	// Length is the frame's payload length in bytes, as its frame header
	// says (RFC 9113 §4.1): data, padding and the Pad Length field.
	Length int64 `json:"length"`
	// Padded is the PADDED flag: a Pad Length field (1 byte) precedes the
	// data, and Padding bytes of padding follow it.
	Padded  bool  `json:"padded,omitempty"`
	Padding int64 `json:"padding,omitempty"`
	// EndStream is the END_STREAM flag: the last frame of the stream.
	EndStream bool `json:"endStream,omitempty"`
	// Offset is the byte offset of the frame header in its direction of
	// the connection (the client's 24-byte preface counts).
	Offset int64 `json:"offset"`
	// Header is the frame header as it came on the wire (RFC 9113 §4.1:
	// length, type, flags, stream identifier; 9 bytes), for the report's
	// drawing of the frame.
	Header [9]byte `json:"-"`
	// Events, Bytes and Inflated are as for Chunk.
	Events   int   `json:"events,omitempty"`
	Bytes    int64 `json:"bytes,omitempty"`
	Inflated int64 `json:"inflated,omitempty"`
	// Ordinal is which of the frame's events the event at hand is, from 1.
	Ordinal int `json:"-"`
	// DataAt is the offset of its first data byte in the body's data
	// (de-chunked, as Event.Offset), -1 in a compressed body; with Bytes
	// and Event.Offset it places an event among the others it carried.
	DataAt int64 `json:"-"`
}

// Data is how many data bytes the frame carried.
func (f *Frame) Data() int64 {
	if f.Padded {
		return f.Length - f.Padding - 1
	}
	return f.Length
}

// Event is one watch event with the chunks that carried it.
type Event struct {
	Conn     *Conn
	Exchange int
	// Seq numbers the events of an exchange from 1.
	Seq int
	// Time is the capture (or arrival) time of the event's last byte.
	Time time.Time
	// Type is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
	Type string
	// Object is the event's object as JSON.
	Object          json.RawMessage
	APIVersion      string
	Kind            string
	Namespace, Name string
	UID             string
	ResourceVersion string
	// InitialEventsEnd marks the BOOKMARK that ends a watch's initial events.
	InitialEventsEnd bool
	// Initial marks the events of a watch-list's initial state: the watch
	// asked for them (sendInitialEvents=true, Kubernetes API concepts:
	// streaming lists), and they came before the initial-events-end
	// BOOKMARK.
	Initial bool
	// RowKind is set for a Table object (kubectl get -w): the kind of its
	// row's object (PartialObjectMetadata unless the rows include whole
	// objects); Namespace, Name and UID are the row object's.
	RowKind string
	// NotObject is the JSON type of an object that is not a JSON object
	// ("number", "string", "boolean", "array"; event.Event.NotObject):
	// Object holds the value as sent. "" for an object.
	NotObject string
	// Status is the Status object of an ERROR event.
	Status *metav1.Status
	// Offset is the byte offset of the event in the de-chunked body; Length
	// is its length in bytes (for protobuf including the 4-byte prefix).
	Offset, Length int64
	// Chunks lists, in wire order, every chunk that carried bytes of the
	// event, with how many of them (Bytes) and how many events the chunk
	// held in all (Events). Empty for a body that is not chunked.
	Chunks []Chunk
	// Frames lists, in wire order, the HTTP/2 DATA frames that carried
	// bytes of the event, as Chunks does for chunks.
	Frames []Frame
	// Format is "json" or "protobuf".
	Format string
	// Diff is an RFC 7386 merge patch from the object's previous version to
	// this one (kwatch --diff); Changes says the same as lines for people,
	// at most diff.MaxChangeLines of them, and MoreChanges counts the
	// changes past those.
	Diff        json.RawMessage
	Changes     []string
	MoreChanges int
}

// When returns the time of the event's last byte.
func (e *Event) When() time.Time { return e.Time }

// Connection returns the connection the record is about (nil: none).
func (e *Event) Connection() *Conn { return e.Conn }

// End says how a body ended. How is one of a fixed set: "last-chunk" (the
// terminating chunk was read), "content-length" (all announced bytes read),
// "close" (the connection closed, which ends a close-delimited body), "no
// body", "closed without the last chunk", "reset without the last chunk",
// "closed before the end of the body", "reset before the end of the body"
// (Content-Length bodies), "capture ended mid-stream", "kwatch detached
// (the connection was still open)" (kwatch attach), "closed by kwatch" or
// "not decoded further"; for an HTTP/2 stream "end of stream" (END_STREAM),
// "reset by RST_STREAM", "closed before the end of the stream" or "reset
// before the end of the stream" (the connection ended). Detail says where
// inside the framing it stopped.
type End struct {
	Conn     *Conn
	Exchange int
	Time     time.Time
	How      string
	Detail   string
	// ByClient is true when the client ended the body before the server
	// did: it closed the connection (How "closed by the client") or
	// reset the HTTP/2 stream (RST_STREAM from the client).
	ByClient bool
	// Clean is true for a complete body.
	Clean bool
	// Trailers are the trailer field lines after the last-chunk.
	Trailers []string
	// LastChunk is the last-chunk's size line with its ending, for the wire
	// view (RFC 9112 §7.1), and, when no trailer field came, the empty line
	// that ends the message after it.
	LastChunk []byte
	// TrailerEnd is the empty line (CRLF, or a bare LF) that ends a
	// trailer section holding fields, for the wire view; empty otherwise.
	TrailerEnd []byte
	// Counts of what the body held.
	Events map[string]int
	Chunks int
	// Frames counts the DATA frames of an HTTP/2 response (Chunks is 0).
	Frames int
	Bytes  int64 // body bytes on the wire, framing included
	Data   int64 // de-chunked data bytes
	// Inflated counts the bytes a gzip or deflate body inflated to, and
	// Members its gzip members (RFC 1952 §2.2) that inflated whole; both 0
	// for a body without a content coding.
	Inflated int64
	Members  int
	Lost     int64 // bytes lost where chunk framing was lost, and bytes passed over until a chunk-size line was found again
	Duration time.Duration
	// Problems and Warnings count the problems reported about the body,
	// by severity.
	Problems, Warnings int
	// Watch repeats Response.Watch.
	Watch bool
	// ChunkSizes lists the chunk sizes in bytes of a non-watch body (for
	// --all-http), in wire order; at most MaxListedChunks are kept.
	ChunkSizes []int64
	// Request is true for the end of a request body.
	Request bool
	// Status is the metav1.Status a non-2xx response carried, if any.
	Status *metav1.Status
	// BodyText is the start of a non-2xx body that is not a Status.
	BodyText string
	// Cut is set when the server ended a watch body before its framing's
	// end (a finding, also said in a warning of kind KindCut): how it
	// ended it. It is nil for a complete body, for the client's own
	// cancel or close (RST_STREAM from the client, its FIN or RST), for
	// the capture's end, and for a body kwatch stopped following.
	Cut *Cut
}

// KindCut is the Problem kind (a warning) of a watch the server ended
// badly (End.Cut).
const KindCut = "watch ended by the server"

// CutKind says what the server ended a watch with (Cut.By).
type CutKind string

// The ways a server cuts a watch short.
const (
	// CutRSTStream: RST_STREAM from the server with an error code other
	// than NO_ERROR (RFC 9113 §6.4).
	CutRSTStream CutKind = "RST_STREAM"
	// CutGOAWAY: the server sent GOAWAY with an error code (RFC 9113
	// §6.8) and the connection ended before the stream did.
	CutGOAWAY CutKind = "GOAWAY"
	// CutReset: the server reset the TCP connection (RST) before the
	// body's end.
	CutReset CutKind = "reset"
	// CutClosed: the server closed the connection (FIN) before the body's
	// end: an HTTP/1.1 body without its last chunk, an HTTP/2 stream
	// without END_STREAM.
	CutClosed CutKind = "closed"
)

// Cut says how the server cut a watch short.
type Cut struct {
	By CutKind
	// Code is the HTTP/2 error code of the RST_STREAM or GOAWAY (RFC 9113
	// §7), e.g. "INTERNAL_ERROR"; empty for a TCP end.
	Code string
}

// String says what ended the watch, e.g. "RST_STREAM INTERNAL_ERROR from
// the server", "the server resetting the connection (TCP RST)".
func (c *Cut) String() string {
	switch c.By {
	case CutRSTStream, CutGOAWAY:
		return string(c.By) + " " + c.Code + " from the server"
	case CutReset:
		return "the server resetting the connection (TCP RST)"
	}
	return "the server closing the connection before the end of the body"
}

// MaxListedChunks bounds End.ChunkSizes.
const MaxListedChunks = 64

// When returns the time the end was seen.
func (e *End) When() time.Time { return e.Time }

// Connection returns the connection the record is about (nil: none).
func (e *End) Connection() *Conn { return e.Conn }

// ConnNote says something about a whole connection: that it is not HTTP
// (e.g. TLS), or how it closed.
type ConnNote struct {
	Conn *Conn
	Time time.Time
	// Kind is "tls" (TLS not decrypted), "not-http", "http2" (HTTP/2 not
	// decoded), "closed", "capture-ended", "h2" (what an HTTP/2
	// connection shows: its preface, SETTINGS, PING round trips,
	// RST_STREAM, GOAWAY), "h2-joined" (an HTTP/2 connection the capture
	// joined in the middle: how it was recognised, what was not seen,
	// the resource of a stream whose request was not seen, a stream that
	// showed no watch events), "tls-decrypted" (a TLS connection decrypted
	// with keys from a key log), "tls-alert", "tls-key-update" or "process" (kwatch
	// attach: which processes are at its ends).
	Kind    string
	Message string
	// Suite is, for a "tls-decrypted" note, the TLS version and cipher
	// suite decrypted, e.g. "TLS 1.3 TLS_AES_128_GCM_SHA256".
	Suite string
	// Stall is, for a "tcp" note of a TCP zero window (RFC 9293 §3.8.6)
	// or an "h2" note of a flow-control stall (RFC 9113 §5.2), how long
	// the receiver's window was at 0; 0 for other notes. Stream is, for
	// the stall of one HTTP/2 stream's window, its identifier (0: the
	// connection's window, or a TCP zero window).
	Stall  time.Duration
	Stream uint32
	// Frame is, for an "h2" note about one frame, its type as RFC 9113 §6
	// names it: "SETTINGS", "PING" (a round trip), "RST_STREAM" (Stream is
	// the stream reset), "GOAWAY", or "WINDOW_UPDATE" (the end of a
	// flow-control stall); "" for other notes.
	Frame string
	// Reset is, for a "closed" note, whether the connection was reset
	// (TCP RST, RFC 9293 §3.10.7.3) rather than closed.
	Reset bool
	// Unlisted is, for a note that sums up others not listed one by one
	// (a TCP zero window N more times), how many; 0 for other notes.
	Unlisted int
	// Bytes is, for a "closed" or "capture-ended" note (a connection's
	// last record), how many bytes its two TCP streams carried, those the
	// capture lost included; 0 when not known (a live connection).
	Bytes int64
	// Resource is, for an "h2-joined" note about a stream of an HTTP/2
	// connection joined mid-connection whose request was not seen (Stream
	// names it), what its first watch event's object names: inferred from
	// that event, since the request's path, which would name it, was not
	// captured. nil for other notes.
	Resource *Resource
	// Processes are, for a "process" note, the processes known at the
	// connection's ends, the client first; nil for other notes.
	Processes []ConnProcess
}

// ConnProcess is a process at one end of a connection, as kwatch attach
// knows it: one it attached to, or (for an attached server) the process on
// the same node that connected to it.
type ConnProcess struct {
	// Role is "client" or "server": the process's end of the connection.
	Role string `json:"role"`
	// PID is its process ID (in the node's initial PID namespace).
	PID int `json:"pid"`
	// Name is its executable's base name, or its command name when that
	// cannot be read (it exited).
	Name string `json:"name"`
	// Attached says that kwatch attach follows it (its TLS secrets are
	// taken).
	Attached bool `json:"attached"`
	// PodUID and ContainerID say, for a process in a pod's cgroup, the
	// pod's UID and the container's ID as the container runtime names it.
	PodUID      string `json:"podUID,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
}

// Resource names what a watch's events are about as their objects say it:
// the apiVersion and kind of the first event's object, and its namespace
// ("" for a cluster-scoped object, or a BOOKMARK, whose object has none).
type Resource struct {
	// APIVersion is the object's group/version, e.g. "v1", "apps/v1".
	APIVersion string `json:"apiVersion"`
	// Kind is the object's kind, e.g. "ConfigMap".
	Kind string `json:"kind"`
	// Namespace is the object's namespace: not the namespace watched,
	// which a watch of every namespace does not have.
	Namespace string `json:"namespace,omitempty"`
	// RowKind is, for a meta.k8s.io Table (kubectl get -w), the kind of
	// its row's object (Event.RowKind): PartialObjectMetadata unless the
	// rows hold whole objects.
	RowKind string `json:"rowKind,omitempty"`
}

// Watched names what a watch whose request was not seen watches, as far
// as its events' objects tell it, and never further: their kind
// ("ConfigMap"); for a meta.k8s.io Table (kubectl get -w) its row's
// object's kind when the rows hold whole objects, else "Table rows": the
// row's object is then a PartialObjectMetadata, whose metadata names no
// kind (managedFields' apiVersion is a group/version, "v1" for every core
// resource), and the columnDefinitions name none either; for a
// PartialObjectMetadata (a metadata informer's watch) "object metadata".
// known is false for the last two: the resource was not seen.
func (r Resource) Watched() (name string, known bool) {
	if !strings.HasPrefix(r.APIVersion, "meta.k8s.io/") {
		return r.Kind, true
	}
	switch r.Kind {
	case "Table":
		if r.RowKind != "" && r.RowKind != "PartialObjectMetadata" && r.RowKind != "Table" {
			return r.RowKind, true
		}
		return "Table rows", false
	case "PartialObjectMetadata":
		return "object metadata", false
	}
	return r.Kind, true
}

// WatchedText is Watched as a line says it: the apiVersion and kind ("v1
// ConfigMap"), "ConfigMap as Table rows", or "Table rows (resource not
// seen)", "object metadata (resource not seen)". It is not escaped.
func (r Resource) WatchedText() string {
	name, known := r.Watched()
	switch {
	case !known:
		return name + " (resource not seen)"
	case r.Kind == "Table" && strings.HasPrefix(r.APIVersion, "meta.k8s.io/"):
		return name + " as Table rows"
	}
	return r.APIVersion + " " + name
}

// Why says what kind of reason a LIST or a watch of kwatch stream had.
type Why string

// The kinds of reason of a LIST or a watch (List.Why, WatchStart.Why).
const (
	// WhyInitial: the first LIST or watch of the run (a watch-list that
	// was refused and listed instead is initial too).
	WhyInitial Why = "initial"
	// WhyAfterList: the watch that follows the first LIST.
	WhyAfterList Why = "after-list"
	// WhyRelist: the state is fetched again (410 Gone, a watch-list that
	// ended before its initial state was complete).
	WhyRelist Why = "re-list"
	// WhyResume: a watch from the last resourceVersion seen.
	WhyResume Why = "resume"
	// WhyFallback: the same watch again, in another format the server
	// serves (JSON instead of protobuf or CBOR).
	WhyFallback Why = "fallback"
)

// When returns the time of the note.
func (n *ConnNote) When() time.Time { return n.Time }

// Connection returns the connection the record is about (nil: none).
func (n *ConnNote) Connection() *Conn { return n.Conn }

// Problem is anything that did not decode cleanly, located as precisely as
// kwatch knows it. The wording of Kind is stable; README.md lists them.
type Problem struct {
	// File is the capture file ("-" for stdin); empty for live input.
	File string
	// Packet is the 1-based packet number in the capture, 0 if none.
	Packet int64
	// Conn is the connection, nil if the problem is not tied to one.
	Conn *Conn
	// Exchange is the exchange number on Conn, 0 if none.
	Exchange int
	// Direction is "client" or "server" for problems in one direction.
	Direction string
	// Where says which byte offset: "stream" (bytes of the TCP stream),
	// "body" (the message body) or "data" (the de-chunked body); Offset is
	// -1 when no offset applies.
	Where  string
	Offset int64
	Time   time.Time
	// Kind is the stable one-line wording; Detail the values seen; Hint
	// what to do about it.
	Kind, Detail, Hint string
	// Warning is true for input that decoded despite the problem.
	Warning bool
}

// KindNoTLSKey is the Problem kind of a TLS connection that a key log was
// given for but holds no key of (pkg/tlsconn reports it).
const KindNoTLSKey = "no TLS key for this connection"

// When returns the time the problem was seen.
func (p *Problem) When() time.Time { return p.Time }

// Connection returns the connection the record is about (nil: none).
func (p *Problem) Connection() *Conn { return p.Conn }

// Location formats where the problem is, e.g. "capture.pcap: packet 12:
// 127.0.0.1:55486 -> 127.0.0.1:8001: server body offset 941".
func (p *Problem) Location() string {
	s := ""
	add := func(part string) {
		if s != "" {
			s += ": "
		}
		s += part
	}
	if p.File != "" {
		add(p.File)
	}
	if p.Packet > 0 {
		add(fmt.Sprintf("packet %d", p.Packet))
	}
	if p.Conn != nil {
		if p.Conn.Node != "" {
			add("node " + p.Conn.Node)
		}
		add(p.Conn.String())
		if p.Conn.HTTP2 && p.Exchange > 0 {
			add(fmt.Sprintf("stream %d", p.Exchange))
		}
	}
	if p.Offset >= 0 && p.Where != "" {
		w := p.Where
		if p.Direction != "" {
			w = p.Direction + " " + w
		}
		add(fmt.Sprintf("%s offset %d", w, p.Offset))
	}
	return s
}

// Summary totals what a whole run saw.
type Summary struct {
	Time        time.Time
	Packets     int64
	Connections int
	// NoData counts, of the Connections of a capture, those whose
	// captured packets carried no byte of payload (a connect and close,
	// a keepalive's ACKs): they show nowhere else.
	NoData    int
	Exchanges int
	Watches   int
	Events    map[string]int
	Chunks    int
	Problems  int
	Warnings  int
	// Live is true for kwatch stream; then WatchesRequested,
	// WatchesOpened, Relists and Bytes (wire bytes read) are set instead of
	// Packets. WatchesRequested counts watch requests made, WatchesOpened
	// those the server answered with a watch stream.
	Live             bool
	WatchesRequested int
	WatchesOpened    int
	Relists          int
	// Retries counts failed lists and watches that were retried.
	Retries  int
	Bytes    int64
	Duration time.Duration
	// Nodes counts the nodes kwatch ran on (--node, pod/NAME: their
	// records merged), 0 for a run of this kwatch alone; Versions counts
	// the object versions (kind, namespace/name, resourceVersion) their
	// events delivered, each once however many watches it was delivered
	// to (pkg/merge).
	Nodes, Versions int
	// LeftOut counts what the filters of kwatch pcap and kwatch attach
	// (--client, --server, --port, --user-agent, --resource, -n) left
	// out; nil when none was given.
	LeftOut *LeftOut
}

// When returns the time of the last packet.
func (s *Summary) When() time.Time { return s.Time }

// LeftOut counts what the filters left out of a run (Summary.LeftOut), so
// that a filtered run says what it did not show.
type LeftOut struct {
	// Connections counts the TCP connections whose endpoints (--client
	// ADDR, --server, --port) or client process (--client NAME) did not
	// match: not decoded at all.
	Connections int
	// Watches counts the watches whose request (or, when it was not seen,
	// whose events) did not match --user-agent, --resource or -n: not
	// shown, and not framed into events when their request decided it.
	// NotKnown counts those of them left out because what a filter asks
	// was not seen: the User-Agent, resource or namespace of a watch
	// whose request came before the capture (or the join), or named an
	// HPACK entry from before it.
	Watches, NotKnown int
	// Exchanges counts the other HTTP exchanges (not watches) left out
	// the same way (--all-http would show them).
	Exchanges int
	// Problems counts the problems and warnings about the exchanges left
	// out: not shown, and not counted in the summary's problems.
	Problems int
}

// Scope is what a list-watch covers, as kubectl's flags say it.
type Scope struct {
	// Resource is the resource, e.g. "configmaps" or "deployments.apps".
	Resource string
	// Namespace is the namespace watched; empty for all namespaces
	// (AllNamespaces) or a cluster-scoped resource.
	Namespace string
	// AllNamespaces is true for -A on a namespaced resource.
	AllNamespaces bool
	// LabelSelector and FieldSelector are the selectors sent (a
	// RESOURCE/NAME argument is the field selector metadata.name=NAME).
	LabelSelector, FieldSelector string
}

// List is the LIST that starts (or restarts) a list-watch (Kubernetes API
// concepts: efficient detection of changes).
type List struct {
	Time time.Time
	Scope
	// Items is the number of objects the list returned.
	Items int
	// ResourceVersion is the list's metadata.resourceVersion, from which the
	// watch starts.
	ResourceVersion string
	// Duration is how long the LIST took.
	Duration time.Duration
	// Reason says why: "initial" or "re-list after 410 Gone".
	Reason string
	// Why is Reason's kind: WhyInitial or WhyRelist.
	Why Why
	// Objects are the listed objects, when asked for (to show them, and
	// for --diff, so that the first change of a listed object has a
	// version to diff with).
	Objects []Object
	// Show: printers show each of Objects on a line of its own, as the
	// current state the watch starts from (kubectl get -w shows it too;
	// not with --watch-only).
	Show bool
}

// Object is one object of a LIST as JSON, with its identity.
type Object struct {
	APIVersion, Kind, Namespace, Name, UID string
	ResourceVersion                        string
	JSON                                   json.RawMessage
}

// When returns the time the list completed.
func (l *List) When() time.Time { return l.Time }

// WatchStart is a watch request being opened.
type WatchStart struct {
	Time time.Time
	// Scope is what the watch covers; empty (Resource "") for a --raw path.
	Scope
	// Number counts the watches of the session from 1.
	Number int
	// Path is the request path and query.
	Path string
	// ResourceVersion is the version the watch starts from.
	ResourceVersion string
	// Reason says why this watch was opened: "initial", "resume", "re-list".
	Reason string
	// Why is Reason's kind; WatchList is true when the watch itself
	// brings the current state (sendInitialEvents=true, a watch-list).
	Why       Why
	WatchList bool
	// After is how long the previous watch lasted (for a resume).
	After time.Duration
	// Transport says how the bytes travel, e.g. "HTTP/1.1 through kubectl
	// proxy http://127.0.0.1:8001".
	Transport string
}

// When returns the time the watch was opened.
func (w *WatchStart) When() time.Time { return w.Time }

// Relist reports what changed between the last state known from the watch
// and a new LIST after the watch fell too far behind (410 Gone): the events
// that happened while nobody was watching. In a capture (pkg/rewatch) it
// compares the objects a client's re-list sent (a watch-list's or a
// watch's initial events) with what that client's earlier watches had
// delivered last: Unchanged objects came again with the resourceVersion
// last seen, which an informer hands its update handler as an update
// whose old and new objects are the same.
type Relist struct {
	Time time.Time
	// Conn and Exchange are, in a capture, the watch whose initial events
	// were the re-list; nil and 0 for kwatch stream's own LIST.
	Conn     *Conn
	Exchange int
	// Sent counts the objects the re-list sent (in a capture; kwatch
	// stream's is the LIST's Items).
	Sent int
	// Partial is set when the client's state before the re-list was not
	// all seen (the capture began after the client's first list, or
	// kwatch stopped following it, see pkg/rewatch): Appeared then names
	// objects not seen before in the capture, and Disappeared is not
	// known (empty).
	Partial bool
	// Appeared, Disappeared and Changed name objects as "namespace/name"
	// (at most MaxListedNames each; the counts are exact).
	Appeared, Disappeared, Changed               []string
	NAppeared, NDisappeared, NChanged, Unchanged int
}

// Connection returns the watch's connection in a capture (nil: kwatch
// stream's re-list, of no one connection).
func (r *Relist) Connection() *Conn { return r.Conn }

// After says what ended the watch that a capture's next watch of the same
// client followed (Restart.After).
type After string

// What ended the watch before (Restart.After).
const (
	// AfterGone: 410 Gone: an ERROR event with status 410 in its stream,
	// or its request answered 410 (the resourceVersion is too old).
	AfterGone After = "gone"
	// AfterReset: its TCP connection was reset (RST, RFC 9293 §3.10.7),
	// or the server reset its HTTP/2 stream (RST_STREAM, RFC 9113 §6.4).
	AfterReset After = "reset"
	// AfterClosed: its connection closed before the body's end.
	AfterClosed After = "closed"
	// AfterServerEnded: the server ended its body cleanly (last-chunk,
	// END_STREAM), e.g. at the watch's timeoutSeconds.
	AfterServerEnded After = "server-ended"
	// AfterClientEnded: the client ended it (closed the connection, or
	// reset the stream) while the server had not.
	AfterClientEnded After = "client-ended"
	// AfterRefused: its request was answered with an error status other
	// than 410 (e.g. 429, 500).
	AfterRefused After = "refused"
)

// RelistHow says how a re-list got the client's state again
// (Restart.Relist).
type RelistHow string

// How a re-list gets the state again (Restart.Relist).
const (
	// RelistWatchList: a watch-list (sendInitialEvents=true), the state
	// as ADDED events up to the initial-events-end BOOKMARK.
	RelistWatchList RelistHow = "watch-list"
	// RelistList: a LIST, then a watch from its resourceVersion.
	RelistList RelistHow = "list"
	// RelistState: a watch from no resourceVersion (or "0"), whose first
	// events are the state.
	RelistState RelistHow = "state"
)

// Restart links a watch of a capture to the earlier watch of the same
// client that it followed (pkg/rewatch): on the same connection, or from
// the same client address on the same resource with the same selectors,
// the earlier one having ended before it began. It says why the new one
// began (it resumed from a resourceVersion, or it re-listed), after what,
// and how long after.
type Restart struct {
	// Time is the new watch's request time.
	Time time.Time
	// Conn and Exchange are the new watch; Prev and PrevExchange the one
	// it followed.
	Conn         *Conn
	Exchange     int
	Prev         *Conn
	PrevExchange int
	// Why is WhyResume (a watch from a resourceVersion) or WhyRelist
	// (the state again); Relist says how a re-list got it.
	Why    Why
	Relist RelistHow
	// After is what ended the watch before; Gap the time from its end
	// (its last record, when its end was not seen) to the new request.
	After After
	Gap   time.Duration
	// ResourceVersion is the one the new watch asked for ("" none; with
	// a LIST first, the one the watch asked for after it);
	// LastResourceVersion the last one the client's earlier watches
	// delivered, bookmarks included ("" none seen).
	ResourceVersion, LastResourceVersion string
	// Resource is the watched path, without its query.
	Resource string
}

// When returns the time of the new watch's request.
func (r *Restart) When() time.Time { return r.Time }

// Connection returns the new watch's connection.
func (r *Restart) Connection() *Conn { return r.Conn }

// Reason says in a few words why the watch began, from the kinds alone,
// e.g. "re-list (watch-list) after a reset", "resume after the server
// ended the watch": the key of Health.RestartReasons.
func (r *Restart) Reason() string {
	s := string(r.Why)
	if r.Why == WhyRelist && r.Relist != "" {
		s += " (" + string(r.Relist) + ")"
	}
	switch r.After {
	case AfterGone:
		s += " after 410 Gone"
	case AfterReset:
		s += " after a reset"
	case AfterClosed:
		s += " after the connection closed"
	case AfterServerEnded:
		s += " after the server ended the watch"
	case AfterClientEnded:
		s += " after the client ended the watch"
	case AfterRefused:
		s += " after an error status"
	}
	return s
}

// MaxListedNames bounds the names listed in a Relist.
const MaxListedNames = 20

// When returns the time of the re-list.
func (r *Relist) When() time.Time { return r.Time }

// Retry reports a failed watch or list attempt that will be retried.
type Retry struct {
	Time  time.Time
	Error string
	// Wait is the back-off before the next attempt.
	Wait time.Duration
}

// When returns the time of the failure.
func (r *Retry) When() time.Time { return r.Time }

// ChunkBuckets are the upper bounds, in bytes, of the chunk-size histogram
// buckets of Health.ChunkSizes; the last bucket holds larger chunks.
var ChunkBuckets = [...]int64{1 << 10, 4 << 10, 16 << 10, 32 << 10}

// ChunkBucket returns the index in Health.ChunkSizes of a chunk (or DATA
// frame) of n bytes.
func ChunkBucket(n int64) int {
	for i, limit := range ChunkBuckets {
		if n < limit {
			return i
		}
	}
	return len(ChunkBuckets)
}

// Health judges one watch (Scope "watch") or the whole run (Scope "all").
type Health struct {
	Time     time.Time
	Scope    string
	Conn     *Conn
	Exchange int
	// Watches counts the watches of the run (Scope "all").
	Watches int
	// Events counts events by type.
	Events map[string]int
	// Findings are resourceVersions that went backwards or repeated: the
	// first ones (pkg/health keeps 100 per watch and 100 in all);
	// FindingsNotListed counts the others.
	Findings          []Finding
	FindingsNotListed int
	// InitialEvents counts a watch-list's initial events (Event.Initial);
	// InitialEnd is the time from the request to its initial-events-end
	// BOOKMARK (0 when none came).
	InitialEvents int
	InitialEnd    time.Duration
	// FirstEvent is the time from the watch request to its first event
	// that is not a BOOKMARK; 0 when unknown.
	FirstEvent time.Duration
	// MaxGap is the longest time between two events; MaxGapAfter the
	// event number it followed.
	MaxGap      time.Duration
	MaxGapAfter int
	// Bookmarks are the intervals between BOOKMARK events.
	Bookmarks Intervals
	// ChunkSizes is a histogram of the sizes of the chunks that carried
	// events (see ChunkBuckets).
	ChunkSizes [len(ChunkBuckets) + 1]int
	// FramingBytes are the bytes of chunk size lines, CRLFs and the
	// last-chunk; DataBytes the de-chunked bytes.
	FramingBytes, DataBytes int64
	// CompressedBytes are the data bytes of gzip or deflate bodies, and
	// InflatedBytes what they inflated to (both 0 without a content
	// coding): InflatedBytes/CompressedBytes is the compression ratio.
	CompressedBytes, InflatedBytes int64
	// Ends lists how each body ended (End.How).
	Ends []string
	// Cut is how the server cut the watch short (End.Cut), nil when it did
	// not (Scope "watch"); Cuts counts the watches it cut (Scope "all").
	Cut  *Cut
	Cuts int
	// ZeroWindows counts the TCP zero windows said (ConnNote.Stall) on
	// the watch's connection while the watch was open (Scope "all": on
	// every connection), and ZeroWindow is their time in all.
	ZeroWindows int
	ZeroWindow  time.Duration
	// FlowStalls counts the HTTP/2 flow-control stalls said (ConnNote.Stall)
	// of the watch's stream, or of its connection's window while it was
	// open, and FlowStall is their time in all.
	FlowStalls int
	FlowStall  time.Duration
	// Restarts counts watches opened again, with their reasons, and
	// Relists the re-lists (Scope "all": kwatch stream's, and the
	// Restart records of a capture).
	Restarts       int
	RestartReasons map[string]int
	Relists        int
	// Began is, for a watch of a capture that followed an earlier watch
	// of its client, how and why it began (Scope "watch"); nil otherwise.
	Began *Restart
	// Resent counts the objects re-lists sent that the client had seen
	// before, and ResentUnchanged those of them that came with the
	// resourceVersion last seen (Relist.Unchanged): of the watch's
	// re-list (Scope "watch"), or of all (Scope "all").
	Resent, ResentUnchanged int
}

// When returns the time the health was judged.
func (h *Health) When() time.Time { return h.Time }

// Connection returns the connection the record is about (nil: none).
func (h *Health) Connection() *Conn { return h.Conn }

// Finding is a problem in a watch's sequence of events.
type Finding struct {
	// Conn is the watch's connection.
	Conn *Conn
	// Seq is the event number (record.Event.Seq) where it was seen.
	Seq    int
	Kind   string
	Detail string
}

// Intervals summarises the times between successive events of one kind.
type Intervals struct {
	Count            int
	Min, Median, Max time.Duration
	// Measured is how many intervals Min, Median and Max are of: Count-1
	// for one watch; for the overall record, those within each watch,
	// pooled (a watch with one bookmark has none).
	Measured int
}

// Version is what a re-list compares an object by: its UID and its
// resourceVersion (metadata.uid, metadata.resourceVersion).
type Version struct{ UID, ResourceVersion string }

// CompareStates fills r's counts and names from fresh, the objects a
// re-list sent, against old, the versions the client held before, each by
// "namespace/name": Unchanged (same UID and resourceVersion), Changed,
// Appeared, and, unless partial (the client's whole state was never
// seen), Disappeared (held, not sent again). Names are sorted, at most
// MaxListedNames of each kind.
func (r *Relist) CompareStates(old, fresh map[string]Version, partial bool) {
	add := func(list *[]string, n *int, k string) {
		*n++
		if len(*list) < MaxListedNames {
			*list = append(*list, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fresh)) {
		o, ok := old[k]
		switch {
		case !ok:
			add(&r.Appeared, &r.NAppeared, k)
		case o != fresh[k]:
			add(&r.Changed, &r.NChanged, k)
		default:
			r.Unchanged++
		}
	}
	if partial {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := fresh[k]; !ok {
			add(&r.Disappeared, &r.NDisappeared, k)
		}
	}
}

// SchemaVersion is the version of the records' JSON Lines schema
// (docs/json.md) that this kwatch writes and reads: the contract between
// kwatch on a node and kwatch reading its stream. It grows by addition:
// fields are added, never renamed or given another meaning; a change that
// an older reader would misread takes a new version.
const SchemaVersion = 1

// Start is the first record of a stream of records that one kwatch writes
// for another to read (kwatch on a node, in a pod that kwatch on a laptop
// started): who writes the stream and in which schema. A reader checks it
// before it trusts anything after it.
type Start struct {
	Time time.Time
	// Schema is the writer's SchemaVersion.
	Schema int
	// Version is the writer's kwatch version (kwatch version).
	Version string
	// Command is what the writer runs: "attach" or "pcap -i".
	Command string
	// Node is the node the writer runs on, as the pod was told it
	// (spec.nodeName); "" when not known.
	Node string
}

// When returns the time the stream started.
func (s *Start) When() time.Time { return s.Time }

// Exit is the last record of such a stream: the writer ends with it,
// after its summary, so that a reader tells a stream that ended from one
// that was cut (a connection through the API server can end early without
// an error, kubernetes/kubernetes#124571).
type Exit struct {
	Time time.Time
	// Code is the writer's exit status (README: Exit status): 0, 1
	// (problems or warnings), 2 (it could not run: Message says why), 3
	// (nothing decoded).
	Code int
	// Message is the writer's one-line error, "" for none.
	Message string
	// Kind says what an error of Code 2 is about, for the reader to decide
	// by: ExitNoTarget (no process to attach to), ExitPermission (the pod
	// lacks a privilege), or "" for any other.
	Kind ExitKind
}

// When returns the time the stream ended.
func (e *Exit) When() time.Time { return e.Time }

// ExitKind names what made a stream's writer fail (Exit.Kind).
type ExitKind string

// The failures a reader decides on (Exit.Kind).
const (
	// ExitNoTarget: no process on the node matched what to attach to.
	ExitNoTarget ExitKind = "no-target"
	// ExitPermission: the writer lacks a privilege it needs (root,
	// CAP_SYS_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE, uprobes).
	ExitPermission ExitKind = "permission"
)
