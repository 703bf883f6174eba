package printer

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/who"
)

// JSON writes one JSON object per line (JSON Lines). Every object has a
// "record" field: "connection", "request", "response", "event", "end",
// "note", "problem" or "summary". README.md documents each. Every line is
// valid UTF-8 (see validUTF8Writer), whatever bytes the capture held.
type JSON struct {
	filter
	w *errWriter
	// lines is where every line goes: through it to w.
	lines validUTF8Writer
	enc   *json.Encoder
	out   []byte
	// chunks and frames are reused for each event's chunk and DATA
	// frame lists.
	chunks []jsonChunk
	frames []jsonFrame
	// lastConn and lastConnText cache the text of the last event's
	// connection.
	lastConn     *record.Conn
	lastConnText string
	// times formats the events' times (rfc3339's text).
	times timeText
	// http2 holds the connections whose connection record said http2,
	// until they end: one that turns out to be HTTP/2 after its record
	// was written (joined mid-connection) gets it written again.
	http2 map[int]bool
}

// NewJSON returns a JSON Lines printer writing to w.
func NewJSON(w io.Writer, opt Options) *JSON {
	ew := &errWriter{w: w}
	j := &JSON{filter: newFilter(opt), w: ew, lines: validUTF8Writer{w: ew}, times: newTimeText(timeFormat, false), http2: map[int]bool{}}
	j.enc = json.NewEncoder(&j.lines)
	j.enc.SetEscapeHTML(false)
	return j
}

// Emit writes r as JSON if the filter passes it.
func (j *JSON) Emit(r record.Record) {
	for _, x := range j.pass(r) {
		if c := record.ConnOf(x); c != nil && c.HTTP2 && !j.http2[c.ID] && j.shownConn[c.ID] {
			// It turned out to be HTTP/2 after its connection record:
			// said again, so that a reader numbers its streams.
			j.http2[c.ID] = true
			// Its client was named by the first.
			_ = j.enc.Encode(connObject(c, nil))
		}
		if n, ok := x.(*record.ConnNote); ok && (n.Kind == "closed" || n.Kind == "capture-ended") {
			delete(j.http2, n.Conn.Key())
		}
		if ev, ok := x.(*record.Event); ok {
			j.event(ev)
			continue
		}
		if v := j.object(x); v != nil {
			_ = j.enc.Encode(v)
		}
		if l, ok := x.(*record.List); ok && l.Show {
			for i := range l.Objects {
				_ = j.enc.Encode(listedObject(l, &l.Objects[i]))
			}
		}
	}
}

// jsonListed is one object of a LIST shown as the current state.
type jsonListed struct {
	Record          string          `json:"record"`
	Time            string          `json:"time"`
	APIVersion      string          `json:"apiVersion,omitempty"`
	Kind            string          `json:"kind,omitempty"`
	Namespace       string          `json:"namespace,omitempty"`
	Name            string          `json:"name"`
	UID             string          `json:"uid,omitempty"`
	ResourceVersion string          `json:"resourceVersion,omitempty"`
	Object          json.RawMessage `json:"object"`
}

func listedObject(l *record.List, o *record.Object) jsonListed {
	return jsonListed{Record: "listed", Time: rfc3339(l.Time), APIVersion: o.APIVersion, Kind: o.Kind,
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Object: o.JSON}
}

// event writes an event line. The object's bytes are written as they are
// (JSON validated when the event was decoded, or written by json.Marshal),
// not re-validated and compacted by encoding/json, which would scan a large
// object twice more; an object spread over several lines is compacted so
// that the output stays one line per record, and bytes that are not UTF-8
// are replaced on the way out (validUTF8Writer).
func (j *JSON) event(v *record.Event) {
	ev := j.jsonEvent(v)
	if bytes.IndexByte(ev.Object, '\n') >= 0 || bytes.IndexByte(ev.Object, '\r') >= 0 {
		var c bytes.Buffer
		if err := json.Compact(&c, ev.Object); err == nil {
			ev.Object = c.Bytes()
		}
	}
	if j.w.err != nil {
		return
	}
	// One write per line: output may be a terminal or a pipe read live.
	// The line is sized for the object at once: appending a large one to
	// a small buffer would copy it at every doubling.
	if need := len(ev.Object) + 512 + 160*len(ev.Chunks) + 96*len(ev.Frames); cap(j.out) < need {
		j.out = make([]byte, 0, need)
	}
	j.out = append(appendEventLine(j.out[:0], &ev), '\n')
	_, _ = j.lines.Write(j.out)
	if cap(j.out) > 1<<20 {
		j.out = nil // do not keep a buffer sized for one huge event
	}
}

// jsonEvent is the JSON form of v. The connection's text is kept from one
// event to the next: events of one connection come in runs.
func (j *JSON) jsonEvent(v *record.Event) jsonEvent {
	if j.chunks == nil {
		j.chunks = make([]jsonChunk, 0, 4) // "chunks" is [] when there are none, never null
	}
	j.chunks = j.chunks[:0]
	for i := range v.Chunks {
		c := &v.Chunks[i]
		jc := jsonChunk{Size: c.Size, SizeLine: c.SizeLine, Offset: c.Offset, Index: c.Index,
			Events: c.Events, Bytes: c.Bytes, Inflated: c.Inflated}
		if c.Events > 1 {
			jc.Ordinal = c.Ordinal
		}
		if c.DataAt >= 0 {
			jc.DataAt = &c.DataAt
		}
		if j.opt.Wire {
			jc.Wire = hexBytes(c.Header)
		}
		j.chunks = append(j.chunks, jc)
	}
	j.frames = j.frames[:0]
	for i := range v.Frames {
		f := &v.Frames[i]
		jf := jsonFrame{Stream: f.Stream, Index: f.Index, Length: f.Length, Padded: f.Padded, Padding: f.Padding,
			EndStream: f.EndStream, Offset: f.Offset, Events: f.Events, Bytes: f.Bytes, Inflated: f.Inflated}
		if f.Events > 1 {
			jf.Ordinal = f.Ordinal
		}
		if f.DataAt >= 0 {
			jf.DataAt = &f.DataAt
		}
		j.frames = append(j.frames, jf)
	}
	var frames []jsonFrame
	if len(j.frames) > 0 {
		frames = j.frames
	}
	obj := v.Object
	if len(obj) == 0 {
		obj = json.RawMessage("null")
	}
	if v.Conn != j.lastConn || v.Conn == nil {
		j.lastConn, j.lastConnText = v.Conn, v.Conn.String()
	}
	return jsonEvent{Record: "event", Type: v.Type, Object: obj, Chunks: j.chunks, Frames: frames,
		Connection: j.lastConnText, Node: nodeOf(v.Conn), Time: j.time(v.Time), Exchange: v.Exchange, Seq: v.Seq,
		APIVersion: v.APIVersion, Kind: v.Kind, Namespace: v.Namespace, Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion,
		InitialEventsEnd: v.InitialEventsEnd, Initial: v.Initial, RowKind: v.RowKind, NotObject: v.NotObject, Offset: v.Offset, Length: v.Length, Format: v.Format, Diff: v.Diff}
}

// time is rfc3339(t), from j.times.
func (j *JSON) time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return j.times.format(t)
}

// Close returns the first write error.
func (j *JSON) Close() error { return j.w.Flush() }

// Flush writes the lines held so far.
func (j *JSON) Flush() { j.w.Flush() }

// seconds returns d in seconds, rounded to the nanosecond so that JSON
// shows 3.985400026, not the 3.9854000259999998 of d.Seconds().
func seconds(d time.Duration) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(d.Seconds(), 'f', 9, 64), 64)
	return f
}

// timeFormat is RFC 3339 in UTC with nanoseconds always written out, so
// that times have one width and sort as strings.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

type jsonConn struct {
	Record     string `json:"record"`
	ID         int    `json:"id"`
	Connection string `json:"connection"`
	Client     string `json:"client"`
	Server     string `json:"server"`
	// RolesGuessed: which side is the client could not be decided
	// (record.Conn.RolesGuessed).
	RolesGuessed bool `json:"rolesGuessed,omitempty"`
	// HTTP2: the connection is HTTP/2 (record.Conn.HTTP2): its exchanges
	// are streams. A connection that turns out to be HTTP/2 after its
	// record was written gets a second one.
	HTTP2 bool `json:"http2,omitempty"`
	// Node is the node the connection was seen on (record.Conn.Node).
	Node string `json:"node,omitempty"`
	// Identity names the connection's client (who.ConnOf).
	Identity *jsonIdentity `json:"identity,omitempty"`
}

// connObject is c's connection record, its client named by id (nil:
// not said).
func connObject(c *record.Conn, id *jsonIdentity) jsonConn {
	return jsonConn{Record: "connection", ID: c.ID, Connection: c.String(),
		Client: c.Client.String(), Server: c.Server.String(), RolesGuessed: c.RolesGuessed, HTTP2: c.HTTP2, Node: c.Node, Identity: id}
}

// nodeOf is the node c was seen on ("" for none, or no connection).
func nodeOf(c *record.Conn) string {
	if c == nil {
		return ""
	}
	return c.Node
}

// jsonIdentity is who.Identity's JSON form: the client as a person reads
// it (text), what its User-Agent says, its process and its node.
type jsonIdentity struct {
	Text      string              `json:"text"`
	UserAgent string              `json:"userAgent,omitempty"`
	Program   string              `json:"program,omitempty"`
	Version   string              `json:"version,omitempty"`
	Platform  string              `json:"platform,omitempty"`
	Commit    string              `json:"commit,omitempty"`
	Component string              `json:"component,omitempty"`
	Command   string              `json:"command,omitempty"`
	Process   *record.ConnProcess `json:"process,omitempty"`
	Node      string              `json:"node,omitempty"`
}

// identityObject is id's JSON form; nil when nothing is known.
func identityObject(id who.Identity) *jsonIdentity {
	if id.IsZero() {
		return nil
	}
	j := &jsonIdentity{Text: id.Text(), Process: id.Process, Node: id.Node}
	if a := id.Agent; a != nil {
		j.UserAgent, j.Program, j.Version, j.Platform, j.Commit, j.Component, j.Command = a.UserAgent, a.Program, a.Version, a.Platform, a.Commit, a.Component, a.Command
	}
	return j
}

type jsonRequest struct {
	Record     string              `json:"record"`
	Time       string              `json:"time"`
	Connection string              `json:"connection"`
	Node       string              `json:"node,omitempty"`
	Exchange   int                 `json:"exchange"`
	Method     string              `json:"method"`
	Target     string              `json:"target"`
	Proto      string              `json:"proto"`
	Watch      bool                `json:"watch"`
	Header     map[string][]string `json:"header,omitempty"`
	// Unknown lists the header fields HPACK could not decode (a
	// connection joined mid-connection).
	Unknown []record.UnknownField `json:"unknownFields,omitempty"`
	// WatchNumber is, for kwatch stream, the number of the watch record
	// (WATCH n) this request opened.
	WatchNumber int `json:"watchNumber,omitempty"`
	// Identity names the request's client (who.Of).
	Identity *jsonIdentity `json:"identity,omitempty"`
}

type jsonResponse struct {
	Record        string `json:"record"`
	Time          string `json:"time"`
	Connection    string `json:"connection"`
	Node          string `json:"node,omitempty"`
	Exchange      int    `json:"exchange"`
	Proto         string `json:"proto"`
	StatusCode    int    `json:"statusCode"`
	Reason        string `json:"reason"`
	Framing       string `json:"framing"`
	ContentLength int64  `json:"contentLength,omitempty"`
	ContentType   string `json:"contentType,omitempty"`
	Watch         bool   `json:"watch"`
	Format        string `json:"format,omitempty"`
	// ContentEncoding is the body's content coding, e.g. "gzip".
	ContentEncoding string              `json:"contentEncoding,omitempty"`
	Header          map[string][]string `json:"header,omitempty"`
	// Inferred: the status and what the body is were inferred from the
	// body's first bytes (record.Response.Inferred).
	Inferred bool                  `json:"inferred,omitempty"`
	Unknown  []record.UnknownField `json:"unknownFields,omitempty"`
	// Identity names the client of a watch whose request was not seen,
	// from its connection alone.
	Identity *jsonIdentity `json:"identity,omitempty"`
}

type jsonChunk struct {
	Size     int64  `json:"size"`
	SizeLine string `json:"sizeLine"`
	Offset   int64  `json:"offset"`
	Index    int    `json:"index"`
	Events   int    `json:"events"`
	// Ordinal is which of the chunk's events the event is, from 1, when
	// it carried several (record.Chunk.Ordinal).
	Ordinal int   `json:"ordinal,omitempty"`
	Bytes   int64 `json:"bytes"`
	// DataAt is the offset of the chunk's first data byte in the body's
	// data (record.Chunk.DataAt); nil in a compressed body.
	DataAt   *int64 `json:"dataAt,omitempty"`
	Inflated int64  `json:"inflated,omitempty"`
	Wire     string `json:"wire,omitempty"`
}

// jsonFrame is record.Frame's JSON form: a DATA frame that carried an
// event.
type jsonFrame struct {
	Stream    uint32 `json:"stream"`
	Index     int    `json:"index"`
	Length    int64  `json:"length"`
	Padded    bool   `json:"padded,omitempty"`
	Padding   int64  `json:"padding,omitempty"`
	EndStream bool   `json:"endStream,omitempty"`
	Offset    int64  `json:"offset"`
	Events    int    `json:"events,omitempty"`
	Ordinal   int    `json:"ordinal,omitempty"`
	Bytes     int64  `json:"bytes,omitempty"`
	DataAt    *int64 `json:"dataAt,omitempty"`
	Inflated  int64  `json:"inflated,omitempty"`
}

type jsonEvent struct {
	Record           string          `json:"record"`
	Type             string          `json:"type"`
	Object           json.RawMessage `json:"object"`
	Chunks           []jsonChunk     `json:"chunks"`
	Frames           []jsonFrame     `json:"frames,omitempty"`
	Connection       string          `json:"connection"`
	Node             string          `json:"node,omitempty"`
	Time             string          `json:"time"`
	Exchange         int             `json:"exchange"`
	Seq              int             `json:"seq"`
	APIVersion       string          `json:"apiVersion,omitempty"`
	Kind             string          `json:"kind,omitempty"`
	RowKind          string          `json:"rowKind,omitempty"`
	Namespace        string          `json:"namespace,omitempty"`
	Name             string          `json:"name,omitempty"`
	UID              string          `json:"uid,omitempty"`
	ResourceVersion  string          `json:"resourceVersion,omitempty"`
	InitialEventsEnd bool            `json:"initialEventsEnd,omitempty"`
	Initial          bool            `json:"initial,omitempty"`
	NotObject        string          `json:"notObject,omitempty"`
	Offset           int64           `json:"offset"`
	Length           int64           `json:"length"`
	Format           string          `json:"format"`
	Diff             json.RawMessage `json:"diff,omitempty"`
}

type jsonEnd struct {
	Record     string `json:"record"`
	Time       string `json:"time"`
	Connection string `json:"connection"`
	Node       string `json:"node,omitempty"`
	Exchange   int    `json:"exchange"`
	How        string `json:"how"`
	Detail     string `json:"detail,omitempty"`
	Clean      bool   `json:"clean"`
	Request    bool   `json:"request,omitempty"`
	// Watch repeats the response's (record.End.Watch); ByClient: the
	// client ended the body first (record.End.ByClient).
	Watch      bool           `json:"watch,omitempty"`
	ByClient   bool           `json:"byClient,omitempty"`
	Events     map[string]int `json:"events"`
	Chunks     int            `json:"chunks"`
	Frames     int            `json:"frames,omitempty"`
	ChunkSizes []int64        `json:"chunkSizes,omitempty"`
	Bytes      int64          `json:"bytes"`
	Data       int64          `json:"dataBytes"`
	// Lost counts bytes lost where the chunk framing was lost
	// (record.End.Lost).
	Lost       int64          `json:"lostBytes,omitempty"`
	Inflated   int64          `json:"inflatedBytes,omitempty"`
	Members    int            `json:"members,omitempty"`
	DurationS  float64        `json:"durationSeconds"`
	Problems   int            `json:"problems"`
	Warnings   int            `json:"warnings"`
	Trailers   []string       `json:"trailers,omitempty"`
	LastChunk  string         `json:"lastChunk,omitempty"`
	TrailerEnd string         `json:"trailerEnd,omitempty"`
	Status     *metav1.Status `json:"status,omitempty"`
	BodyText   string         `json:"body,omitempty"`
	Cut        *jsonCut       `json:"cut,omitempty"`
}

// jsonCut is record.Cut's JSON form: how the server cut a watch short.
type jsonCut struct {
	By   record.CutKind `json:"by"`
	Code string         `json:"code,omitempty"`
}

func cutObject(c *record.Cut) *jsonCut {
	if c == nil {
		return nil
	}
	return &jsonCut{By: c.By, Code: c.Code}
}

type jsonNote struct {
	Record     string `json:"record"`
	Time       string `json:"time"`
	Connection string `json:"connection"`
	Node       string `json:"node,omitempty"`
	Kind       string `json:"kind"`
	Message    string `json:"message"`
	Suite      string `json:"suite,omitempty"`
	// StallS is a TCP zero window's or a flow-control stall's time, in
	// seconds.
	StallS float64 `json:"stallSeconds,omitempty"`
	// Frame, Stream, Reset, Unlisted and Bytes are record.ConnNote's:
	// the HTTP/2 frame an "h2" note is about and its stream, a "closed"
	// note's reset, the notes a summing note stands for, and the bytes a
	// connection's last note counts.
	Frame    string `json:"frame,omitempty"`
	Stream   uint32 `json:"stream,omitempty"`
	Reset    bool   `json:"reset,omitempty"`
	Unlisted int    `json:"unlisted,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	// Resource is what a stream whose request was not seen is about, as
	// its first event names it (record.ConnNote.Resource).
	Resource *jsonResource `json:"resource,omitempty"`
	// Processes are the processes at a "process" note's connection's
	// ends (record.ConnNote.Processes).
	Processes []record.ConnProcess `json:"processes,omitempty"`
}

// jsonResource is record.Resource with the stream it names.
type jsonResource struct {
	Stream uint32 `json:"stream"`
	record.Resource
}

type jsonProblem struct {
	Record     string `json:"record"`
	Problem    string `json:"problem"`
	Detail     string `json:"detail,omitempty"`
	Hint       string `json:"hint,omitempty"`
	Severity   string `json:"severity"`
	File       string `json:"file,omitempty"`
	Packet     int64  `json:"packet,omitempty"`
	Connection string `json:"connection,omitempty"`
	Node       string `json:"node,omitempty"`
	Exchange   int    `json:"exchange,omitempty"`
	Direction  string `json:"direction,omitempty"`
	Where      string `json:"where,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
	Time       string `json:"time,omitempty"`
	Message    string `json:"message"`
}

type jsonSummary struct {
	Record string `json:"record"`
	// Packets is left out for kwatch stream, which reads no packets.
	Packets     *int64         `json:"packets,omitempty"`
	Connections int            `json:"connections"`
	NoData      int            `json:"noData,omitempty"`
	Undecoded   map[string]int `json:"undecoded"`
	Decrypted   map[string]int `json:"decrypted,omitempty"`
	// NotDecrypted counts the TLS connections left out as not decrypted
	// (Options.HideUndecrypted), when there were any.
	NotDecrypted *jsonNotDecrypted `json:"notDecrypted,omitempty"`
	Watches      int               `json:"watches"`
	Events       map[string]int    `json:"events"`
	Chunks       int               `json:"chunks"`
	Frames       int               `json:"frames,omitempty"`
	Problems     int               `json:"problems"`
	Warnings     int               `json:"warnings"`
	// LeftOut counts what the filters left out (record.LeftOut), when
	// any was given.
	LeftOut *jsonLeftOut `json:"leftOut,omitempty"`
	// Live sessions (kwatch stream) only.
	WatchesRequested *int    `json:"watchesRequested,omitempty"`
	WatchesOpened    *int    `json:"watchesOpened,omitempty"`
	Relists          *int    `json:"relists,omitempty"`
	Retries          *int    `json:"retries,omitempty"`
	Bytes            *int64  `json:"bytes,omitempty"`
	DurationS        float64 `json:"durationSeconds,omitempty"`
	// Nodes and Versions: a run on nodes (record.Summary).
	Nodes    int `json:"nodes,omitempty"`
	Versions int `json:"versions,omitempty"`
}

// jsonLeftOut is record.LeftOut's JSON form.
type jsonLeftOut struct {
	Connections int `json:"connections"`
	Watches     int `json:"watches"`
	NotKnown    int `json:"notKnown"`
	Exchanges   int `json:"exchanges"`
	Problems    int `json:"problems"`
}

// jsonNotDecrypted is NotDecrypted's JSON form.
type jsonNotDecrypted struct {
	Connections int   `json:"connections"`
	Bytes       int64 `json:"bytes"`
	NoKey       int   `json:"noKey"`
}

// jsonScope is record.Scope's JSON form, shared by list and watch.
type jsonScope struct {
	Resource      string `json:"resource,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
	AllNamespaces bool   `json:"allNamespaces,omitempty"`
	LabelSelector string `json:"labelSelector,omitempty"`
	FieldSelector string `json:"fieldSelector,omitempty"`
}

func scopeObject(s record.Scope) jsonScope {
	return jsonScope{Resource: s.Resource, Namespace: s.Namespace, AllNamespaces: s.AllNamespaces,
		LabelSelector: s.LabelSelector, FieldSelector: s.FieldSelector}
}

type jsonList struct {
	Record string `json:"record"`
	Time   string `json:"time"`
	jsonScope
	Items           int     `json:"items"`
	ResourceVersion string  `json:"resourceVersion"`
	DurationS       float64 `json:"durationSeconds"`
	Reason          string  `json:"reason"`
	// Why is Reason's kind (record.List.Why).
	Why record.Why `json:"why,omitempty"`
}

type jsonWatch struct {
	Record string `json:"record"`
	Time   string `json:"time"`
	jsonScope
	Number          int     `json:"number"`
	Path            string  `json:"path"`
	ResourceVersion string  `json:"resourceVersion"`
	Reason          string  `json:"reason"`
	AfterS          float64 `json:"afterSeconds,omitempty"`
	Transport       string  `json:"transport"`
	// Why is Reason's kind, WatchList that the watch brings the state
	// itself (record.WatchStart).
	Why       record.Why `json:"why,omitempty"`
	WatchList bool       `json:"watchList,omitempty"`
}

type jsonRelist struct {
	Record string `json:"record"`
	Time   string `json:"time"`
	// Connection, Exchange, Sent and Partial: a capture's re-list
	// (record.Relist.Conn set).
	Connection   string   `json:"connection,omitempty"`
	Node         string   `json:"node,omitempty"`
	Exchange     int      `json:"exchange,omitempty"`
	Sent         *int     `json:"sent,omitempty"`
	Partial      bool     `json:"partial,omitempty"`
	Appeared     []string `json:"appeared"`
	Disappeared  []string `json:"disappeared"`
	Changed      []string `json:"changed"`
	NAppeared    int      `json:"nAppeared"`
	NDisappeared int      `json:"nDisappeared"`
	NChanged     int      `json:"nChanged"`
	Unchanged    int      `json:"unchanged"`
}

// jsonRestart is record.Restart's JSON form.
type jsonRestart struct {
	Record              string  `json:"record"`
	Time                string  `json:"time"`
	Connection          string  `json:"connection"`
	Node                string  `json:"node,omitempty"`
	Exchange            int     `json:"exchange"`
	Previous            jsonRef `json:"previous"`
	Why                 string  `json:"why"`
	Relist              string  `json:"relist,omitempty"`
	After               string  `json:"after"`
	GapS                float64 `json:"gapSeconds"`
	ResourceVersion     string  `json:"resourceVersion,omitempty"`
	LastResourceVersion string  `json:"lastResourceVersion,omitempty"`
	Resource            string  `json:"resource"`
	Reason              string  `json:"reason"`
}

// jsonRef names a watch by its connection and exchange.
type jsonRef struct {
	Connection string `json:"connection"`
	// ID is the connection record's id: a connection that followed
	// another may have the same endpoints (a port used again).
	ID       int    `json:"id"`
	Node     string `json:"node,omitempty"`
	Exchange int    `json:"exchange"`
}

func restartObject(v *record.Restart) *jsonRestart {
	if v == nil {
		return nil
	}
	return &jsonRestart{Record: "restart", Time: rfc3339(v.Time), Connection: v.Conn.String(), Node: nodeOf(v.Conn), Exchange: v.Exchange,
		Previous: jsonRef{v.Prev.String(), v.Prev.Key(), nodeOf(v.Prev), v.PrevExchange}, Why: string(v.Why), Relist: string(v.Relist), After: string(v.After),
		GapS: seconds(v.Gap), ResourceVersion: v.ResourceVersion, LastResourceVersion: v.LastResourceVersion,
		Resource: v.Resource, Reason: v.Reason()}
}

type jsonRetry struct {
	Record string  `json:"record"`
	Time   string  `json:"time"`
	Error  string  `json:"error"`
	WaitS  float64 `json:"waitSeconds"`
}

// object returns the JSON form of r for encoding/json; events are written
// by event instead.
func (j *JSON) object(r record.Record) any {
	switch v := r.(type) {
	case connRecord:
		if v.conn.HTTP2 {
			j.http2[v.conn.ID] = true
		}
		return connObject(v.conn, identityObject(v.who))
	case *record.Request:
		return jsonRequest{Record: "request", Time: rfc3339(v.Time), Connection: v.Conn.String(), Node: nodeOf(v.Conn),
			Exchange: v.Exchange, Method: v.Method, Target: v.Target, Proto: v.Proto, Watch: v.Watch, Header: v.Header, Unknown: v.Unknown,
			WatchNumber: j.watchNumber(v.Conn, v.Exchange), Identity: identityObject(j.whoOf(v.Conn, v))}
	case *record.Response:
		r := jsonResponse{Record: "response", Time: rfc3339(v.Time), Connection: v.Conn.String(), Node: nodeOf(v.Conn),
			Exchange: v.Exchange, Proto: v.Proto, StatusCode: v.StatusCode, Reason: v.Reason,
			Framing: v.Framing, ContentLength: v.ContentLength, ContentType: v.ContentType,
			Watch: v.Watch, Format: v.Format, ContentEncoding: v.ContentEncoding, Header: v.Header, Inferred: v.Inferred, Unknown: v.Unknown}
		if v.Watch && v.Request == nil {
			r.Identity = identityObject(j.whoOf(v.Conn, nil))
		}
		return r
	case *record.End:
		e := jsonEnd{Record: "end", Time: rfc3339(v.Time), Connection: v.Conn.String(), Node: nodeOf(v.Conn), Exchange: v.Exchange,
			How: v.How, Detail: v.Detail, Clean: v.Clean, Request: v.Request, Watch: v.Watch, ByClient: v.ByClient, Events: v.Events, Chunks: v.Chunks, Frames: v.Frames,
			Bytes: v.Bytes, Data: v.Data, Lost: v.Lost, Inflated: v.Inflated, Members: v.Members, DurationS: seconds(v.Duration), Problems: v.Problems, Warnings: v.Warnings,
			Trailers: v.Trailers, Status: v.Status, BodyText: v.BodyText, Cut: cutObject(v.Cut)}
		if e.Events == nil { // a map of counts is written even when empty
			e.Events = map[string]int{}
		}
		if !v.Watch {
			e.ChunkSizes = v.ChunkSizes
		}
		if len(v.LastChunk) > 0 {
			e.LastChunk = hexBytes(v.LastChunk)
		}
		if len(v.TrailerEnd) > 0 {
			e.TrailerEnd = hexBytes(v.TrailerEnd)
		}
		return e
	case *record.ConnNote:
		n := jsonNote{Record: "note", Time: rfc3339(v.Time), Connection: v.Conn.String(), Node: nodeOf(v.Conn), Kind: v.Kind, Message: v.Message, Suite: v.Suite,
			StallS: seconds(v.Stall), Frame: v.Frame, Stream: v.Stream, Reset: v.Reset, Unlisted: v.Unlisted, Bytes: v.Bytes, Processes: v.Processes}
		if v.Resource != nil {
			n.Resource = &jsonResource{Stream: v.Stream, Resource: *v.Resource}
		}
		return n
	case *record.Problem:
		p := jsonProblem{Record: "problem", Problem: v.Kind, Detail: v.Detail, Hint: v.Hint, Severity: "error",
			File: v.File, Packet: v.Packet, Connection: v.Conn.String(), Node: nodeOf(v.Conn), Exchange: v.Exchange,
			Direction: v.Direction, Where: v.Where, Time: rfc3339(v.Time), Message: ProblemText(v)}
		if v.Warning {
			p.Severity = "warning"
		}
		if v.Offset >= 0 && v.Where != "" {
			off := v.Offset
			p.Offset = &off
		}
		return p
	case *record.Summary:
		t := &j.tally
		s := jsonSummary{Record: "summary", Packets: &v.Packets, Connections: v.Connections, NoData: v.NoData, Undecoded: t.Undecoded, Decrypted: t.Decrypted,
			Watches: t.Watches, Events: t.Events, Chunks: t.Chunks, Frames: t.Frames, Problems: t.Problems, Warnings: t.Warnings,
			Nodes: v.Nodes, Versions: v.Versions}
		if n := t.NotDecrypted; n.Connections > 0 {
			s.NotDecrypted = &jsonNotDecrypted{Connections: n.Connections, Bytes: n.Bytes, NoKey: n.NoKey}
		}
		if l := v.LeftOut; l != nil {
			s.LeftOut = &jsonLeftOut{Connections: l.Connections, Watches: l.Watches, NotKnown: l.NotKnown, Exchanges: l.Exchanges, Problems: l.Problems}
		}
		if v.Live {
			s.Packets = nil
			s.Connections = t.Connections
			s.WatchesRequested, s.WatchesOpened = &v.WatchesRequested, &v.WatchesOpened
			s.Relists, s.Retries, s.Bytes, s.DurationS = &v.Relists, &v.Retries, &v.Bytes, seconds(v.Duration)
		}
		return s
	case *record.List:
		return jsonList{Record: "list", Time: rfc3339(v.Time), jsonScope: scopeObject(v.Scope),
			Items: v.Items, ResourceVersion: v.ResourceVersion, DurationS: seconds(v.Duration), Reason: v.Reason, Why: v.Why}
	case *record.WatchStart:
		return jsonWatch{Record: "watch", Time: rfc3339(v.Time), jsonScope: scopeObject(v.Scope), Number: v.Number, Path: v.Path,
			ResourceVersion: v.ResourceVersion, Reason: v.Reason, AfterS: seconds(v.After), Transport: v.Transport, Why: v.Why, WatchList: v.WatchList}
	case *record.Relist:
		j := jsonRelist{Record: "relist", Time: rfc3339(v.Time), Appeared: v.Appeared, Disappeared: v.Disappeared,
			Changed: v.Changed, NAppeared: v.NAppeared, NDisappeared: v.NDisappeared, NChanged: v.NChanged, Unchanged: v.Unchanged}
		if v.Conn != nil {
			j.Connection, j.Node, j.Exchange, j.Sent, j.Partial = v.Conn.String(), v.Conn.Node, v.Exchange, &v.Sent, v.Partial
		}
		return j
	case *record.Restart:
		return restartObject(v)
	case *record.Health:
		return healthObject(v)
	case *record.Retry:
		return jsonRetry{Record: "retry", Time: rfc3339(v.Time), Error: v.Error, WaitS: seconds(v.Wait)}
	case *record.Start:
		return jsonStart{Record: "kwatch", Time: rfc3339(v.Time), Schema: v.Schema, Version: v.Version, Command: v.Command, Node: v.Node}
	case *record.Exit:
		return jsonExit{Record: "exit", Time: rfc3339(v.Time), Code: v.Code, Message: v.Message, Kind: v.Kind}
	}
	return nil
}

// jsonStart is record.Start's JSON form, the first line of a stream one
// kwatch writes for another.
type jsonStart struct {
	Record  string `json:"record"`
	Time    string `json:"time"`
	Schema  int    `json:"schema"`
	Version string `json:"version"`
	Command string `json:"command"`
	Node    string `json:"node,omitempty"`
}

// jsonExit is record.Exit's JSON form, the last line of such a stream.
type jsonExit struct {
	Record  string          `json:"record"`
	Time    string          `json:"time"`
	Code    int             `json:"code"`
	Message string          `json:"message,omitempty"`
	Kind    record.ExitKind `json:"kind,omitempty"`
}

type jsonFinding struct {
	Connection string `json:"connection,omitempty"`
	Node       string `json:"node,omitempty"`
	Seq        int    `json:"seq"`
	Kind       string `json:"kind"`
	Detail     string `json:"detail"`
}

type jsonIntervals struct {
	Count   int      `json:"count"`
	MinS    *float64 `json:"minSeconds,omitempty"`
	MedianS *float64 `json:"medianSeconds,omitempty"`
	MaxS    *float64 `json:"maxSeconds,omitempty"`
	// Measured is of how many intervals (record.Intervals.Measured),
	// written for the overall record when any.
	Measured int `json:"measured,omitempty"`
}

type jsonHealth struct {
	Record     string `json:"record"`
	Scope      string `json:"scope"`
	Time       string `json:"time"`
	Connection string `json:"connection,omitempty"`
	// ConnectionID is the connection record's id (a watch's health comes
	// at its end, when another connection may have the same endpoints).
	ConnectionID    int            `json:"connectionId,omitempty"`
	Node            string         `json:"node,omitempty"`
	Exchange        int            `json:"exchange,omitempty"`
	Watches         int            `json:"watches,omitempty"`
	Events          map[string]int `json:"events"`
	Findings        []jsonFinding  `json:"findings"`
	NotListed       int            `json:"findingsNotListed,omitempty"`
	FirstEventS     float64        `json:"firstEventSeconds,omitempty"`
	InitialEvents   int            `json:"initialEvents,omitempty"`
	InitialEndS     float64        `json:"initialEventsEndSeconds,omitempty"`
	MaxGapS         float64        `json:"maxGapSeconds"`
	MaxGapAfter     int            `json:"maxGapAfter,omitempty"`
	Bookmarks       jsonIntervals  `json:"bookmarks"`
	ChunkSizes      map[string]int `json:"chunkSizes"`
	FramingBytes    int64          `json:"framingBytes"`
	DataBytes       int64          `json:"dataBytes"`
	CompressedBytes int64          `json:"compressedBytes,omitempty"`
	InflatedBytes   int64          `json:"inflatedBytes,omitempty"`
	Ends            []string       `json:"ends,omitempty"`
	Cut             *jsonCut       `json:"cut,omitempty"`
	Cuts            int            `json:"cuts,omitempty"`
	ZeroWindows     int            `json:"zeroWindows,omitempty"`
	ZeroWindowS     float64        `json:"zeroWindowSeconds,omitempty"`
	FlowStalls      int            `json:"flowControlStalls,omitempty"`
	FlowStallS      float64        `json:"flowControlStallSeconds,omitempty"`
	Restarts        int            `json:"restarts,omitempty"`
	RestartReasons  map[string]int `json:"restartReasons,omitempty"`
	Relists         int            `json:"relists,omitempty"`
	// Began, Resent and ResentUnchanged: how a capture's watch began
	// after an earlier one of its client, and what its re-list sent
	// again (record.Health.Began).
	Began           *jsonRestart `json:"began,omitempty"`
	Resent          *int         `json:"resent,omitempty"`
	ResentUnchanged *int         `json:"resentUnchanged,omitempty"`
}

func healthObject(h *record.Health) jsonHealth {
	j := jsonHealth{Record: "health", Scope: h.Scope, Time: rfc3339(h.Time), Connection: h.Conn.String(), ConnectionID: h.Conn.Key(), Node: nodeOf(h.Conn),
		Exchange: h.Exchange, Watches: h.Watches, Events: h.Events, Findings: []jsonFinding{}, NotListed: h.FindingsNotListed,
		FirstEventS: seconds(h.FirstEvent), InitialEvents: h.InitialEvents, InitialEndS: seconds(h.InitialEnd), MaxGapS: seconds(h.MaxGap), MaxGapAfter: h.MaxGapAfter,
		Bookmarks:  jsonIntervals{Count: h.Bookmarks.Count},
		ChunkSizes: map[string]int{}, FramingBytes: h.FramingBytes, DataBytes: h.DataBytes, CompressedBytes: h.CompressedBytes, InflatedBytes: h.InflatedBytes, Ends: h.Ends,
		Cut: cutObject(h.Cut), Cuts: h.Cuts,
		Restarts: h.Restarts, RestartReasons: h.RestartReasons, Relists: h.Relists,
		Began:       restartObject(h.Began),
		ZeroWindows: h.ZeroWindows, ZeroWindowS: seconds(h.ZeroWindow), FlowStalls: h.FlowStalls, FlowStallS: seconds(h.FlowStall)}
	if h.Resent > 0 || h.Began != nil {
		j.Resent, j.ResentUnchanged = &h.Resent, &h.ResentUnchanged
	}
	// The overall record has the count only, and the intervals when they
	// were measured within some watches (with how many).
	if h.Scope != "all" || h.Bookmarks.Measured > 0 {
		minS, medS, maxS := seconds(h.Bookmarks.Min), seconds(h.Bookmarks.Median), seconds(h.Bookmarks.Max)
		j.Bookmarks.MinS, j.Bookmarks.MedianS, j.Bookmarks.MaxS = &minS, &medS, &maxS
		if h.Scope == "all" {
			j.Bookmarks.Measured = h.Bookmarks.Measured
		}
	}
	for _, f := range h.Findings {
		j.Findings = append(j.Findings, jsonFinding{Connection: f.Conn.String(), Node: nodeOf(f.Conn), Seq: f.Seq, Kind: f.Kind, Detail: f.Detail})
	}
	for i, n := range h.ChunkSizes {
		if n > 0 {
			j.ChunkSizes[ChunkBucketNames[i]] = n
		}
	}
	return j
}
