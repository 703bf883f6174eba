package printer

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
)

// DefaultMaxLineBytes bounds one line a JSONReader reads: the largest
// watch event kwatch decodes by default (event.DefaultMaxEventBytes), as
// JSON, with room for its chunks and fields.
const DefaultMaxLineBytes = 2*event.DefaultMaxEventBytes + 1<<20

// maxClosedConns bounds the connections a JSONReader remembers after their
// last note: a later record may still name one (a watch of another
// connection that followed it, its health).
const maxClosedConns = 4096

// maxConns bounds the connections a JSONReader knows at once.
const maxConns = 1 << 16

// ReadOptions tune a JSONReader.
type ReadOptions struct {
	// MaxLineBytes bounds one line, in bytes; DefaultMaxLineBytes when 0.
	// A longer line is an error (ErrLineTooLong), and reading goes on
	// with the next one.
	MaxLineBytes int
	// Node, when set, is the node every connection read was seen on
	// (record.Conn.Node).
	Node string
	// Unnumbered reads every connection with ID 0, for the reader's user
	// to number (record.Conn.ID) before it hands a record on: kwatch
	// numbers the connections of several nodes in the order it shows
	// them. The reader keeps the writer's numbers to itself.
	Unnumbered bool
}

// ErrLineTooLong is wrapped by a ReadError for a line longer than
// ReadOptions.MaxLineBytes.
var ErrLineTooLong = errors.New("line too long")

// ReadError is a line a JSONReader could not read as a record: Line counts
// from 1. Reading may go on with the next line.
type ReadError struct {
	Line int
	Err  error
}

// Error says which line and why.
func (e *ReadError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the reason.
func (e *ReadError) Unwrap() error { return e.Err }

// JSONReader reads the JSON Lines that JSON writes (docs/json.md) back into
// records: the same record types, with the same values, so that the other
// printers and the sinks (health, --diff, the report) take them as they
// take a capture's. It is how kwatch reads the stream kwatch on a node
// writes. Connection records are not returned: each connection becomes
// the record.Conn the records that name it point to (their text, "client
// -> server", names it; a connection record written again marks it
// HTTP/2). What the JSON writes as derived text (a problem's message, a
// restart's reason) is derived again from the fields it came from, a
// request's flags (watch-list, initial state) from its target, as the
// decoder sets them, and a client's identity (pkg/who) from its request's
// header, its connection's process note and its node, as the printers
// derive it.
//
// Bounds: one line at most ReadOptions.MaxLineBytes; at most 64 Ki
// connections known at once (of them at most 4096 ended), and 1024 requests
// waiting for their response.
type JSONReader struct {
	br  *bufio.Reader
	opt ReadOptions
	// line is the number of the last line read.
	line int
	// conns are the connections by their text, ids by the writer's ID
	// (their connection record's), and wids the writer's IDs by
	// connection.
	conns map[string]*record.Conn
	ids   map[int]*record.Conn
	wids  map[*record.Conn]int
	// closed are the writer's IDs of connections whose last note was
	// read, oldest first (forgotten past maxClosedConns).
	closed []int
	// requests are the requests waiting for their response.
	requests map[reqKey]*record.Request
	// list is a LIST read, held until the objects listed after it are.
	list *record.List
	// next is a record read after the list, returned after it.
	next record.Record
	// skipped counts the lines of record kinds this reader does not know.
	skipped int
	// madeUp numbers, from -1 down, the connections no connection record
	// gave.
	madeUp int
	// buf holds the line being read.
	buf []byte
}

// reqKey names an exchange of a connection read.
type reqKey struct {
	c        *record.Conn
	exchange int
}

// NewJSONReader returns a reader of the JSON Lines in r.
func NewJSONReader(r io.Reader, opt ReadOptions) *JSONReader {
	if opt.MaxLineBytes <= 0 {
		opt.MaxLineBytes = DefaultMaxLineBytes
	}
	return &JSONReader{br: bufio.NewReaderSize(r, 64<<10), opt: opt, conns: map[string]*record.Conn{},
		ids: map[int]*record.Conn{}, wids: map[*record.Conn]int{}, requests: map[reqKey]*record.Request{}}
}

// Line returns the number of the last line read, from 1.
func (r *JSONReader) Line() int { return r.line }

// Skipped counts the lines whose record kind this reader does not know (a
// newer writer's), passed over.
func (r *JSONReader) Skipped() int { return r.skipped }

// Next returns the next record: io.EOF after the last one (io.ErrUnexpectedEOF
// when the last line has no newline: the stream was cut inside it), or a
// *ReadError for a line that is not a record, after which Next reads on.
func (r *JSONReader) Next() (record.Record, error) {
	for {
		if r.next != nil {
			rec := r.next
			r.next = nil
			return rec, nil
		}
		line, err := r.readLine()
		if err != nil {
			if r.list != nil && (err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)) {
				l := r.list
				r.list = nil
				if err == io.EOF {
					return l, nil
				}
			}
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rec, err := r.decode(line)
		if err != nil {
			if r.list != nil {
				l := r.list
				r.list = nil
				return l, nil // the bad line is skipped after it
			}
			return nil, &ReadError{Line: r.line, Err: err}
		}
		if rec == nil {
			continue
		}
		if l, ok := rec.(*record.List); ok {
			prev := r.list
			r.list = l
			if prev != nil {
				return prev, nil
			}
			continue
		}
		if r.list != nil {
			l := r.list
			r.list, r.next = nil, rec
			return l, nil
		}
		return rec, nil
	}
}

// readLine returns the next line without its newline: io.EOF at the end,
// io.ErrUnexpectedEOF for a last line without newline, a *ReadError for a
// line over the bound (its rest is passed over).
func (r *JSONReader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	tooLong := false
	for {
		part, err := r.br.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(part) > r.opt.MaxLineBytes+1 {
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, part...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if len(r.buf) == 0 && !tooLong {
				return nil, io.EOF
			}
			r.line++
			return nil, &ReadError{Line: r.line, Err: io.ErrUnexpectedEOF}
		case err != nil:
			return nil, err
		}
		r.line++
		if tooLong {
			return nil, &ReadError{Line: r.line, Err: fmt.Errorf("%w: over %d bytes", ErrLineTooLong, r.opt.MaxLineBytes)}
		}
		if cap(r.buf) > 4<<20 && len(r.buf) < 64<<10 {
			r.buf = append([]byte(nil), r.buf...) // do not keep a buffer sized for one huge event
		}
		return bytes.TrimSuffix(r.buf, []byte("\n")), nil
	}
}

// kindOf returns a line's record kind: the writer puts "record" first; a
// line from elsewhere is read whole for it.
func kindOf(line []byte) (string, error) {
	const prefix = `{"record":"`
	if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i]), nil
		}
	}
	var probe struct {
		Record string `json:"record"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return "", err
	}
	if probe.Record == "" {
		return "", errors.New(`not a record: no "record" field`)
	}
	return probe.Record, nil
}

// decode returns the record of one line, nil for a line that is no record
// of its own (a connection, an object listed).
func (r *JSONReader) decode(line []byte) (record.Record, error) {
	kind, err := kindOf(line)
	if err != nil {
		return nil, err
	}
	into := func(v any) error {
		if err := json.Unmarshal(line, v); err != nil {
			return fmt.Errorf("%s record: %w", kind, err)
		}
		return nil
	}
	switch kind {
	case "connection":
		var v jsonConn
		if err := into(&v); err != nil {
			return nil, err
		}
		_, err := r.connection(&v)
		return nil, err
	case "request":
		var v jsonRequest
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.request(&v)
	case "response":
		var v jsonResponse
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.response(&v)
	case "event":
		var v jsonEvent
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.event(&v)
	case "end":
		var v jsonEnd
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.end(&v)
	case "note":
		var v jsonNote
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.note(&v)
	case "problem":
		var v jsonProblem
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.problem(&v)
	case "health":
		var v jsonHealth
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.health(&v)
	case "summary":
		var v jsonSummary
		if err := into(&v); err != nil {
			return nil, err
		}
		return summaryRecord(&v), nil
	case "restart":
		var v jsonRestart
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.restart(&v)
	case "relist":
		var v jsonRelist
		if err := into(&v); err != nil {
			return nil, err
		}
		return r.relist(&v)
	case "list":
		var v jsonList
		if err := into(&v); err != nil {
			return nil, err
		}
		return listRecord(&v)
	case "listed":
		var v jsonListed
		if err := into(&v); err != nil {
			return nil, err
		}
		if r.list == nil {
			return nil, errors.New("listed record without the list it belongs to")
		}
		r.list.Show = true
		r.list.Objects = append(r.list.Objects, record.Object{APIVersion: v.APIVersion, Kind: v.Kind, Namespace: v.Namespace,
			Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion, JSON: v.Object})
		return nil, nil
	case "watch":
		var v jsonWatch
		if err := into(&v); err != nil {
			return nil, err
		}
		return watchRecord(&v)
	case "retry":
		var v jsonRetry
		if err := into(&v); err != nil {
			return nil, err
		}
		t, err := parseTime(v.Time)
		return &record.Retry{Time: t, Error: v.Error, Wait: duration(v.WaitS)}, err
	case "kwatch":
		var v jsonStart
		if err := into(&v); err != nil {
			return nil, err
		}
		t, err := parseTime(v.Time)
		return &record.Start{Time: t, Schema: v.Schema, Version: v.Version, Command: v.Command, Node: v.Node}, err
	case "exit":
		var v jsonExit
		if err := into(&v); err != nil {
			return nil, err
		}
		t, err := parseTime(v.Time)
		return &record.Exit{Time: t, Code: v.Code, Message: v.Message, Kind: v.Kind}, err
	}
	r.skipped++
	return nil, nil
}

// connection takes a connection record: a new connection, or one said
// again because it turned out to be HTTP/2 (marked so from then on).
func (r *JSONReader) connection(v *jsonConn) (*record.Conn, error) {
	client, err := netip.ParseAddrPort(v.Client)
	if err != nil {
		return nil, fmt.Errorf("connection record: client: %w", err)
	}
	server, err := netip.ParseAddrPort(v.Server)
	if err != nil {
		return nil, fmt.Errorf("connection record: server: %w", err)
	}
	if c := r.ids[v.ID]; c != nil && c.Client == client && c.Server == server {
		c.HTTP2 = c.HTTP2 || v.HTTP2
		return c, nil
	}
	if len(r.ids) >= maxConns {
		return nil, fmt.Errorf("connection record: over %d connections at once", maxConns)
	}
	node := v.Node
	if r.opt.Node != "" {
		node = r.opt.Node
	}
	c := &record.Conn{ID: v.ID, Client: client, Server: server, RolesGuessed: v.RolesGuessed, HTTP2: v.HTTP2, Node: node}
	if r.opt.Unnumbered {
		c.ID = 0
	}
	if old := r.ids[v.ID]; old != nil {
		delete(r.wids, old)
	}
	r.ids[v.ID] = c
	r.wids[c] = v.ID
	r.conns[c.String()] = c
	if v.Connection != c.String() {
		r.conns[v.Connection] = c // as written, if not as kwatch writes it
	}
	return c, nil
}

// conn returns the connection a record names by its text: nil for "", one
// made up (with an ID of no connection record) for a text no connection
// record gave.
func (r *JSONReader) conn(text string) (*record.Conn, error) {
	if text == "" {
		return nil, nil
	}
	if c := r.conns[text]; c != nil {
		return c, nil
	}
	client, server, ok := strings.Cut(text, " -> ")
	if !ok {
		return nil, fmt.Errorf("connection %q is not \"client -> server\"", text)
	}
	r.madeUp--
	return r.connection(&jsonConn{ID: r.madeUp, Client: client, Server: server, Connection: text})
}

// connOf is conn for a record that is about a connection: one that names
// none is an error.
func (r *JSONReader) connOf(text string) (*record.Conn, error) {
	if text == "" {
		return nil, errors.New(`no "connection": this record is about one`)
	}
	return r.conn(text)
}

// ended forgets the connections that ended longest ago, past
// maxClosedConns, once c's last note is read.
func (r *JSONReader) ended(c *record.Conn) {
	id, ok := r.wids[c]
	if !ok {
		return
	}
	r.closed = append(r.closed, id)
	for len(r.closed) > maxClosedConns {
		id := r.closed[0]
		r.closed = r.closed[1:]
		if old := r.ids[id]; old != nil {
			delete(r.ids, id)
			delete(r.wids, old)
			if r.conns[old.String()] == old {
				delete(r.conns, old.String())
			}
		}
	}
}

func (r *JSONReader) request(v *jsonRequest) (record.Record, error) {
	c, err := r.connOf(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	req := &record.Request{Conn: c, Exchange: v.Exchange, Time: t, Method: v.Method, Target: v.Target, Proto: v.Proto,
		Header: v.Header, Watch: v.Watch, Unknown: v.Unknown}
	if v.Target != "" {
		// As the decoder sets them from the target.
		req.Secrets, req.OtherResource = event.SecretsPath(v.Target), event.OtherResourcePath(v.Target)
		if req.Watch {
			req.StartsWithState, req.InitialState = exchange.WatchState(v.Target)
		}
	}
	if len(r.requests) < 1024 {
		r.requests[reqKey{c, v.Exchange}] = req
	}
	return req, nil
}

func (r *JSONReader) response(v *jsonResponse) (record.Record, error) {
	c, err := r.connOf(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	k := reqKey{c, v.Exchange}
	req := r.requests[k]
	if v.StatusCode >= 200 { // an interim response (1xx) is not the exchange's last
		delete(r.requests, k)
	}
	return &record.Response{Conn: c, Exchange: v.Exchange, Time: t, Proto: v.Proto, StatusCode: v.StatusCode, Reason: v.Reason,
		Header: v.Header, Framing: v.Framing, ContentLength: v.ContentLength, ContentType: v.ContentType, Watch: v.Watch,
		Format: v.Format, ContentEncoding: v.ContentEncoding, Request: req, Inferred: v.Inferred, Unknown: v.Unknown}, nil
}

func (r *JSONReader) event(v *jsonEvent) (record.Record, error) {
	c, err := r.connOf(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	e := &record.Event{Conn: c, Exchange: v.Exchange, Seq: v.Seq, Time: t, Type: v.Type, Object: v.Object,
		APIVersion: v.APIVersion, Kind: v.Kind, Namespace: v.Namespace, Name: v.Name, UID: v.UID, ResourceVersion: v.ResourceVersion,
		InitialEventsEnd: v.InitialEventsEnd, Initial: v.Initial, RowKind: v.RowKind, NotObject: v.NotObject,
		Offset: v.Offset, Length: v.Length, Format: v.Format, Diff: v.Diff}
	if v.Kind == "Status" {
		// As the decoder reads it: case-sensitive, as client-go does.
		var st metav1.Status
		if sigsjson.UnmarshalCaseSensitivePreserveInts(v.Object, &st) == nil {
			e.Status = &st
		}
	}
	if v.Chunks != nil {
		e.Chunks = make([]record.Chunk, len(v.Chunks))
	}
	for i, jc := range v.Chunks {
		ch := record.Chunk{Index: jc.Index, Size: jc.Size, SizeLine: jc.SizeLine, Offset: jc.Offset, Events: jc.Events,
			Bytes: jc.Bytes, Inflated: jc.Inflated, Ordinal: max(jc.Ordinal, 1), DataAt: -1}
		if jc.DataAt != nil {
			ch.DataAt = *jc.DataAt
		}
		if jc.Wire != "" {
			if ch.Header, err = parseHex(jc.Wire); err != nil {
				return nil, fmt.Errorf("event record: chunk %d: wire: %w", jc.Index, err)
			}
		}
		e.Chunks[i] = ch
	}
	for _, jf := range v.Frames {
		f := record.Frame{Stream: jf.Stream, Index: jf.Index, Length: jf.Length, Padded: jf.Padded, Padding: jf.Padding,
			EndStream: jf.EndStream, Offset: jf.Offset, Events: jf.Events, Bytes: jf.Bytes, Inflated: jf.Inflated,
			Ordinal: max(jf.Ordinal, 1), DataAt: -1}
		if jf.DataAt != nil {
			f.DataAt = *jf.DataAt
		}
		f.Header = dataFrameHeader(&f)
		e.Frames = append(e.Frames, f)
	}
	return e, nil
}

// dataFrameHeader is the 9-byte header of a DATA frame as RFC 9113 §4.1
// and §6.1 lay it out: its length, type 0x00, its flags END_STREAM (0x01)
// and PADDED (0x08), and its stream identifier. (Flags a sender set that
// DATA does not define are not in the JSON, and not here.)
func dataFrameHeader(f *record.Frame) [9]byte {
	var h [9]byte
	h[0], h[1], h[2] = byte(f.Length>>16), byte(f.Length>>8), byte(f.Length)
	if f.EndStream {
		h[4] |= 0x01
	}
	if f.Padded {
		h[4] |= 0x08
	}
	h[5], h[6], h[7], h[8] = byte(f.Stream>>24)&0x7f, byte(f.Stream>>16), byte(f.Stream>>8), byte(f.Stream)
	return h
}

func (r *JSONReader) end(v *jsonEnd) (record.Record, error) {
	c, err := r.connOf(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	e := &record.End{Conn: c, Exchange: v.Exchange, Time: t, How: v.How, Detail: v.Detail, ByClient: v.ByClient, Clean: v.Clean,
		Trailers: v.Trailers, Events: v.Events, Chunks: v.Chunks, Frames: v.Frames, Bytes: v.Bytes, Data: v.Data,
		Inflated: v.Inflated, Members: v.Members, Lost: v.Lost, Duration: duration(v.DurationS), Problems: v.Problems,
		Warnings: v.Warnings, Watch: v.Watch, ChunkSizes: v.ChunkSizes, Request: v.Request, Status: v.Status, BodyText: v.BodyText}
	if v.LastChunk != "" {
		if e.LastChunk, err = parseHex(v.LastChunk); err != nil {
			return nil, fmt.Errorf("end record: lastChunk: %w", err)
		}
	}
	if v.TrailerEnd != "" {
		if e.TrailerEnd, err = parseHex(v.TrailerEnd); err != nil {
			return nil, fmt.Errorf("end record: trailerEnd: %w", err)
		}
	}
	if v.Cut != nil {
		e.Cut = &record.Cut{By: v.Cut.By, Code: v.Cut.Code}
	}
	if !v.Request {
		// The exchange is over: a request whose response never came is
		// not waited for longer.
		delete(r.requests, reqKey{c, v.Exchange})
	}
	return e, nil
}

func (r *JSONReader) note(v *jsonNote) (record.Record, error) {
	c, err := r.connOf(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	n := &record.ConnNote{Conn: c, Time: t, Kind: v.Kind, Message: v.Message, Suite: v.Suite, Stall: duration(v.StallS),
		Frame: v.Frame, Stream: v.Stream, Reset: v.Reset, Unlisted: v.Unlisted, Bytes: v.Bytes, Processes: v.Processes}
	if v.Resource != nil {
		res := v.Resource.Resource
		n.Resource = &res
		if n.Stream == 0 {
			n.Stream = v.Resource.Stream
		}
	}
	if c != nil && (v.Kind == "closed" || v.Kind == "capture-ended") {
		r.ended(c)
	}
	return n, nil
}

func (r *JSONReader) problem(v *jsonProblem) (record.Record, error) {
	c, err := r.conn(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	p := &record.Problem{File: v.File, Packet: v.Packet, Conn: c, Exchange: v.Exchange, Direction: v.Direction, Where: v.Where,
		Offset: -1, Time: t, Kind: v.Problem, Detail: v.Detail, Hint: v.Hint, Warning: v.Severity == "warning"}
	if v.Offset != nil {
		p.Offset = *v.Offset
	}
	return p, nil
}

func (r *JSONReader) health(v *jsonHealth) (record.Record, error) {
	c := r.ids[v.ConnectionID] // by its ID: the endpoints may have been used again since
	var err error
	if c == nil || c.String() != v.Connection {
		if c, err = r.conn(v.Connection); err != nil {
			return nil, err
		}
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	h := &record.Health{Time: t, Scope: v.Scope, Conn: c, Exchange: v.Exchange, Watches: v.Watches, Events: v.Events,
		FindingsNotListed: v.NotListed, InitialEvents: v.InitialEvents, InitialEnd: duration(v.InitialEndS),
		FirstEvent: duration(v.FirstEventS), MaxGap: duration(v.MaxGapS), MaxGapAfter: v.MaxGapAfter,
		FramingBytes: v.FramingBytes, DataBytes: v.DataBytes, CompressedBytes: v.CompressedBytes, InflatedBytes: v.InflatedBytes,
		Ends: v.Ends, Cuts: v.Cuts, ZeroWindows: v.ZeroWindows, ZeroWindow: duration(v.ZeroWindowS),
		FlowStalls: v.FlowStalls, FlowStall: duration(v.FlowStallS), Restarts: v.Restarts, RestartReasons: v.RestartReasons,
		Relists: v.Relists}
	b := &h.Bookmarks
	b.Count = v.Bookmarks.Count
	for _, d := range []struct {
		to *time.Duration
		s  *float64
	}{{&b.Min, v.Bookmarks.MinS}, {&b.Median, v.Bookmarks.MedianS}, {&b.Max, v.Bookmarks.MaxS}} {
		if d.s != nil {
			*d.to = duration(*d.s)
		}
	}
	b.Measured = v.Bookmarks.Measured
	if v.Scope != "all" && b.Count > 1 {
		b.Measured = b.Count - 1 // one watch's intervals are all measured
	}
	for _, f := range v.Findings {
		fc := c // a watch's findings are about its connection
		if fc.String() != f.Connection {
			if fc, err = r.conn(f.Connection); err != nil {
				return nil, err
			}
		}
		h.Findings = append(h.Findings, record.Finding{Conn: fc, Seq: f.Seq, Kind: f.Kind, Detail: f.Detail})
	}
	for name, n := range v.ChunkSizes {
		i := bucketIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("health record: chunk size bucket %q is none of %v", name, ChunkBucketNames)
		}
		h.ChunkSizes[i] = n
	}
	if v.Cut != nil {
		h.Cut = &record.Cut{By: v.Cut.By, Code: v.Cut.Code}
	}
	if v.Began != nil {
		rs, err := r.restart(v.Began)
		if err != nil {
			return nil, err
		}
		h.Began = rs.(*record.Restart)
	}
	if v.Resent != nil {
		h.Resent = *v.Resent
	}
	if v.ResentUnchanged != nil {
		h.ResentUnchanged = *v.ResentUnchanged
	}
	return h, nil
}

func bucketIndex(name string) int {
	for i, n := range ChunkBucketNames {
		if n == name {
			return i
		}
	}
	return -1
}

func summaryRecord(v *jsonSummary) *record.Summary {
	s := &record.Summary{Connections: v.Connections, NoData: v.NoData, Watches: v.Watches, Events: v.Events,
		Chunks: v.Chunks, Problems: v.Problems, Warnings: v.Warnings, Duration: duration(v.DurationS), Nodes: v.Nodes, Versions: v.Versions}
	if v.Packets != nil {
		s.Packets = *v.Packets
	} else {
		s.Live = true
	}
	for _, f := range []struct {
		to   *int
		from *int
	}{{&s.WatchesRequested, v.WatchesRequested}, {&s.WatchesOpened, v.WatchesOpened}, {&s.Relists, v.Relists}, {&s.Retries, v.Retries}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if v.Bytes != nil {
		s.Bytes = *v.Bytes
	}
	if l := v.LeftOut; l != nil {
		s.LeftOut = &record.LeftOut{Connections: l.Connections, Watches: l.Watches, NotKnown: l.NotKnown, Exchanges: l.Exchanges, Problems: l.Problems}
	}
	return s
}

func (r *JSONReader) restart(v *jsonRestart) (record.Record, error) {
	c, err := r.connOf(v.Connection)
	if err != nil {
		return nil, err
	}
	prev := r.ids[v.Previous.ID] // by its ID: the endpoints may have been used again since
	if prev == nil || prev.String() != v.Previous.Connection {
		if prev, err = r.conn(v.Previous.Connection); err != nil {
			return nil, err
		}
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	return &record.Restart{Time: t, Conn: c, Exchange: v.Exchange, Prev: prev, PrevExchange: v.Previous.Exchange,
		Why: record.Why(v.Why), Relist: record.RelistHow(v.Relist), After: record.After(v.After), Gap: duration(v.GapS),
		ResourceVersion: v.ResourceVersion, LastResourceVersion: v.LastResourceVersion, Resource: v.Resource}, nil
}

func (r *JSONReader) relist(v *jsonRelist) (record.Record, error) {
	c, err := r.conn(v.Connection)
	if err != nil {
		return nil, err
	}
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	rl := &record.Relist{Time: t, Conn: c, Exchange: v.Exchange, Partial: v.Partial, Appeared: v.Appeared,
		Disappeared: v.Disappeared, Changed: v.Changed, NAppeared: v.NAppeared, NDisappeared: v.NDisappeared,
		NChanged: v.NChanged, Unchanged: v.Unchanged}
	if v.Sent != nil {
		rl.Sent = *v.Sent
	}
	return rl, nil
}

func scopeRecord(s jsonScope) record.Scope {
	return record.Scope{Resource: s.Resource, Namespace: s.Namespace, AllNamespaces: s.AllNamespaces,
		LabelSelector: s.LabelSelector, FieldSelector: s.FieldSelector}
}

func listRecord(v *jsonList) (record.Record, error) {
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	return &record.List{Time: t, Scope: scopeRecord(v.jsonScope), Items: v.Items, ResourceVersion: v.ResourceVersion,
		Duration: duration(v.DurationS), Reason: v.Reason, Why: v.Why}, nil
}

func watchRecord(v *jsonWatch) (record.Record, error) {
	t, err := parseTime(v.Time)
	if err != nil {
		return nil, err
	}
	return &record.WatchStart{Time: t, Scope: scopeRecord(v.jsonScope), Number: v.Number, Path: v.Path,
		ResourceVersion: v.ResourceVersion, Reason: v.Reason, Why: v.Why, WatchList: v.WatchList, After: duration(v.AfterS),
		Transport: v.Transport}, nil
}

// parseTime reads a record's time, RFC 3339 as the writer writes it; ""
// is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", s, err)
	}
	return t, nil
}

// duration is a number of seconds, as the writer rounds them to the
// nanosecond, as a time.Duration.
func duration(s float64) time.Duration {
	if math.IsNaN(s) || math.Abs(s) > math.MaxInt64/1e9 {
		return 0
	}
	return time.Duration(math.Round(s * 1e9))
}

// parseHex reads bytes written as hexBytes writes them: two hex digits a
// byte, separated by spaces.
func parseHex(s string) ([]byte, error) {
	return hex.DecodeString(strings.ReplaceAll(s, " ", ""))
}
