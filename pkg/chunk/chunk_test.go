package chunk

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kwatch/kwatch/internal/testutil"
	"io"
	"math/rand"
	"strings"
	"testing"
)

// recorder is a Handler that logs every callback as one line of text, in
// the order the Decoder made them, so that a test compares what the Decoder
// reported with what it expected. Adjacent Data calls for the same chunk are
// merged into one "data" line: how data is split across calls depends on how
// the input was split across Writes, and nothing else may.
//
// It also checks what one callback alone can check (Header = Line + line
// ending, Ext a suffix of Line, DataOffset, Data only inside a chunk) and
// logs a "BUG" line when a check fails, so that it shows up in any diff.
type recorder struct {
	log       []string
	pending   []byte // data not yet logged, for chunk pendingIx
	pendingIx int
	inChunk   int // index of the chunk between ChunkStart and ChunkEnd, or -1
	dataCalls int // Data calls, before merging

	// When in is set (the whole input, no bytes skipped), the recorder
	// also checks that every slice it is given is the input at the offset
	// reported for it.
	in      []byte
	dataPos int64  // offset of the next data byte in in
	all     []byte // all chunk data, concatenated
	sawLast bool   // the last-chunk was started
}

// at checks that b is in[off:off+len(b)] when the recorder knows the input.
func (r *recorder) at(what string, off int64, b []byte) {
	if r.in == nil {
		return
	}
	if off < 0 || off+int64(len(b)) > int64(len(r.in)) || !bytes.Equal(r.in[off:off+int64(len(b))], b) {
		r.add("BUG %s %q is not the input at offset %d", what, b, off)
	}
}

func newRecorder() *recorder { return &recorder{inChunk: -1, pendingIx: -1} }

func (r *recorder) flush() {
	if r.pendingIx >= 0 {
		r.log = append(r.log, fmt.Sprintf("data %d %q", r.pendingIx, r.pending))
		r.pending, r.pendingIx = r.pending[:0], -1
	}
}

func (r *recorder) add(format string, args ...any) {
	r.flush()
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

// lost tells the recorder that framing was lost (Skip returned false): the
// chunk it was in will not end.
func (r *recorder) lost() { r.inChunk = -1 }

// lines returns the log with any pending data flushed.
func (r *recorder) lines() []string {
	r.flush()
	return r.log
}

func (r *recorder) ChunkStart(c *Chunk) {
	s := fmt.Sprintf("start %d size=%d line=%q off=%d data=%d", c.Index, c.Size, c.Line, c.Offset, c.DataOffset)
	if len(c.Ext) > 0 {
		s += fmt.Sprintf(" ext=%q", c.Ext)
	}
	if c.Last {
		s += " last"
	}
	r.add("%s", s)
	if end := string(bytes.TrimPrefix(c.Header, c.Line)); !bytes.HasPrefix(c.Header, c.Line) || end != "\r\n" && end != "\n" {
		r.add("BUG header %q is not line %q and a line ending", c.Header, c.Line)
	}
	if !bytes.HasSuffix(c.Line, c.Ext) {
		r.add("BUG ext %q is not a suffix of line %q", c.Ext, c.Line)
	}
	if c.DataOffset != c.Offset+int64(len(c.Header)) {
		r.add("BUG data offset %d, want %d+%d", c.DataOffset, c.Offset, len(c.Header))
	}
	if c.Last != (c.Size == 0) {
		r.add("BUG last=%v with size %d", c.Last, c.Size)
	}
	if r.inChunk >= 0 {
		r.add("BUG chunk %d started inside chunk %d", c.Index, r.inChunk)
	}
	if !c.Last {
		r.inChunk = c.Index
	}
	r.sawLast = r.sawLast || c.Last
	r.at("header", c.Offset, c.Header)
	r.dataPos = c.DataOffset
}

func (r *recorder) Data(c *Chunk, p []byte) {
	r.dataCalls++
	if len(p) == 0 {
		r.add("BUG empty data for chunk %d", c.Index)
	}
	if c.Index != r.inChunk {
		r.add("BUG data for chunk %d inside chunk %d", c.Index, r.inChunk)
	}
	if r.pendingIx != c.Index {
		r.flush()
		r.pendingIx = c.Index
	}
	r.pending = append(r.pending, p...)
	r.all = append(r.all, p...)
	r.at("data", r.dataPos, p)
	r.dataPos += int64(len(p))
}

func (r *recorder) ChunkEnd(c *Chunk) {
	r.add("end %d", c.Index)
	if c.Index != r.inChunk {
		r.add("BUG end of chunk %d inside chunk %d", c.Index, r.inChunk)
	}
	r.inChunk = -1
}

func (r *recorder) Trailer(line []byte, offset int64) {
	r.add("trailer %q @%d", line, offset)
	r.at("trailer", offset, line)
}

func (r *recorder) Done(offset int64) {
	r.add("done @%d", offset)
	if r.in != nil && offset > int64(len(r.in)) {
		r.add("BUG done at %d after the end of the input", offset)
	}
}

func (r *recorder) Warning(err *Error) {
	r.add("warn %s @%d", err.Kind, err.Offset)
	if err.Err != nil {
		r.add("BUG warning wraps %v", err.Err)
	}
}

// result is what feeding one input to a Decoder produced.
type result struct {
	log   []string
	n     int    // bytes consumed, summed over the Writes
	err   string // errString of the first error, "" for none
	done  bool
	close error // what Close returned after the Writes
	rec   *recorder
}

// errString renders an error from the Decoder as "kind @offset", the part
// of it that is stable and that tests compare.
func errString(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Sprintf("not an *Error: %T %v", err, err)
	}
	return fmt.Sprintf("%s @%d", e.Kind, e.Offset)
}

// splitter returns the length of the next Write given the bytes left.
type splitter func(rest int) int

func whole(rest int) int { return rest }

func oneByte(int) int { return 1 }

// randomSplits returns a splitter that cuts at random places, often into
// small pieces, reproducibly for a seed.
func randomSplits(seed int64) splitter {
	rng := rand.New(rand.NewSource(seed))
	return func(rest int) int {
		if rng.Intn(2) == 0 {
			return 1 + rng.Intn(min(rest, 8))
		}
		return 1 + rng.Intn(rest)
	}
}

// decode feeds in to a new Decoder in the pieces next gives, stopping at the
// first error or once the body is complete, like a caller that hands the
// rest of its buffer to whatever follows the body.
func decode(in []byte, lim Limits, next splitter) result {
	rec := newRecorder()
	rec.in = in
	d := NewDecoder(rec, lim)
	res := result{rec: rec}
	for off := 0; off < len(in); {
		k := next(len(in) - off)
		piece := in[off : off+k]
		n, err := d.Write(piece)
		if n < 0 || n > len(piece) {
			rec.add("BUG Write returned n=%d for %d bytes", n, len(piece))
			break
		}
		res.n += n
		off += k
		if err != nil {
			res.err = errString(err)
			break
		}
		if n < len(piece) {
			if !d.Done() {
				rec.add("BUG Write consumed %d of %d bytes without error before the end", n, len(piece))
			}
			break
		}
	}
	if int64(res.n) != d.Offset() {
		rec.add("BUG consumed %d bytes but Offset is %d", res.n, d.Offset())
	}
	res.close = d.Close()
	res.log, res.done = rec.lines(), d.Done()
	return res
}

// diffLogs reports the first difference between two callback logs, or "".
func diffLogs(got, want []string) string {
	i, g, w, ok := testutil.FirstDiff(got, want)
	if !ok {
		return ""
	}
	if i >= len(got) {
		g = "(none)"
	}
	if i >= len(want) {
		w = "(none)"
	}
	return fmt.Sprintf("line %d:\n got: %s\nwant: %s\nwhole log:\n\t%s", i, g, w, strings.Join(got, "\n\t"))
}

func data(ix int, s string) string { return fmt.Sprintf("data %d %q", ix, s) }

var decodeTests = []struct {
	name  string
	in    string
	extra string // bytes after the body: the next message on the connection
	lim   Limits
	want  []string
	// For bodies without error, all of in must be consumed. For errors,
	// err is "kind @offset" and n the bytes consumed.
	err string
	n   int
}{
	{
		name: "simple body",
		in:   "3\r\nabc\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=3 line="3" off=0 data=3`,
			data(0, "abc"),
			`end 0`,
			`start 1 size=0 line="0" off=8 data=11 last`,
			`done @13`,
		},
	},
	{
		name: "several chunks",
		in:   "7\r\nhello, \r\n17\r\nworld! 0123456789abcdef\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=7 line="7" off=0 data=3`,
			data(0, "hello, "),
			`end 0`,
			`start 1 size=23 line="17" off=12 data=16`,
			data(1, "world! 0123456789abcdef"),
			`end 1`,
			`start 2 size=0 line="0" off=41 data=44 last`,
			`done @46`,
		},
	},
	{
		name: "upper-case hex",
		in:   "1A\r\nabcdefghijklmnopqrstuvwxyz\r\nB\r\n0123456789a\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=26 line="1A" off=0 data=4`,
			data(0, "abcdefghijklmnopqrstuvwxyz"),
			`end 0`,
			`start 1 size=11 line="B" off=32 data=35`,
			data(1, "0123456789a"),
			`end 1`,
			`start 2 size=0 line="0" off=48 data=51 last`,
			`done @53`,
		},
	},
	{
		name: "mixed-case hex",
		in:   "aB\r\n" + strings.Repeat("x", 0xab) + "\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=171 line="aB" off=0 data=4`,
			data(0, strings.Repeat("x", 0xab)),
			`end 0`,
			`start 1 size=0 line="0" off=177 data=180 last`,
			`done @182`,
		},
	},
	{
		name: "leading zeros and twenty zeros as last-chunk",
		in:   "0003\r\nabc\r\n00000000000000000000\r\n\r\n",
		want: []string{
			`start 0 size=3 line="0003" off=0 data=6`,
			data(0, "abc"),
			`end 0`,
			`start 1 size=0 line="00000000000000000000" off=11 data=33 last`,
			`done @35`,
		},
	},
	{
		name: "leading zeros beyond sixteen digits",
		in:   "00000000000000000001\r\nx\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=1 line="00000000000000000001" off=0 data=22`,
			data(0, "x"),
			`end 0`,
			`start 1 size=0 line="0" off=25 data=28 last`,
			`done @30`,
		},
	},
	{
		name: "largest chunk-size",
		in:   "0007fffffffffffffff\r\nab",
		want: []string{
			`start 0 size=9223372036854775807 line="0007fffffffffffffff" off=0 data=21`,
			data(0, "ab"),
		},
	},
	{
		name: "chunk-ext with token value",
		in:   "3;name=value\r\nabc\r\n0;x\r\n\r\n",
		want: []string{
			`start 0 size=3 line="3;name=value" off=0 data=14 ext=";name=value"`,
			data(0, "abc"),
			`end 0`,
			`start 1 size=0 line="0;x" off=19 data=24 ext=";x" last`,
			`done @26`,
		},
	},
	{
		name: "chunk-ext with quoted-string and escaped quotes",
		in:   "3;a=\"q \\\"x\\\" y\";b\r\nabc\r\n0;last=1\r\n\r\n",
		want: []string{
			`start 0 size=3 line="3;a=\"q \\\"x\\\" y\";b" off=0 data=19 ext=";a=\"q \\\"x\\\" y\";b"`,
			data(0, "abc"),
			`end 0`,
			`start 1 size=0 line="0;last=1" off=24 data=34 ext=";last=1" last`,
			`done @36`,
		},
	},
	{
		name: "chunk-ext with BWS around separators",
		in:   "1 ; a = b\t;c= \"d;e\" \r\nx\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=1 line="1 ; a = b\t;c= \"d;e\" " off=0 data=22 ext=" ; a = b\t;c= \"d;e\" "`,
			data(0, "x"),
			`end 0`,
			`start 1 size=0 line="0" off=25 data=28 last`,
			`done @30`,
		},
	},
	{
		name: "whitespace before semicolon",
		in:   "2 ;ext\r\nab\r\n0\r\n\r\n",
		want: []string{
			`start 0 size=2 line="2 ;ext" off=0 data=8 ext=" ;ext"`,
			data(0, "ab"),
			`end 0`,
			`start 1 size=0 line="0" off=12 data=15 last`,
			`done @17`,
		},
	},
	{
		name: "whitespace after size without ext",
		in:   "2 \r\nab\r\n0\t\r\n\r\n",
		want: []string{
			`warn whitespace after chunk-size @1`,
			`start 0 size=2 line="2 " off=0 data=4 ext=" "`,
			data(0, "ab"),
			`end 0`,
			`warn whitespace after chunk-size @9`,
			`start 1 size=0 line="0\t" off=8 data=12 ext="\t" last`,
			`done @14`,
		},
	},
	{
		name: "malformed ext",
		in:   "2;=x\r\nab\r\n1;a=b;\r\nc\r\n0;a=\"open\r\n\r\n",
		want: []string{
			`warn malformed chunk-ext @1`,
			`start 0 size=2 line="2;=x" off=0 data=6 ext=";=x"`,
			data(0, "ab"),
			`end 0`,
			`warn malformed chunk-ext @11`,
			`start 1 size=1 line="1;a=b;" off=10 data=18 ext=";a=b;"`,
			data(1, "c"),
			`end 1`,
			`warn malformed chunk-ext @22`,
			`start 2 size=0 line="0;a=\"open" off=21 data=32 ext=";a=\"open" last`,
			`done @34`,
		},
	},
	{
		// A CR not followed by LF inside chunk-ext makes the extension
		// malformed (RFC 9112 §2.2: the element is invalid), not the
		// size: it is ignored like any malformed chunk-ext.
		name: "malformed ext: CR not followed by LF",
		in:   "1;a\rb\r\nx\r\n0\r\n\r\n",
		want: []string{
			`warn malformed chunk-ext @1`,
			`start 0 size=1 line="1;a\rb" off=0 data=7 ext=";a\rb"`,
			data(0, "x"),
			`end 0`,
			`start 1 size=0 line="0" off=10 data=13 last`,
			`done @15`,
		},
	},
	{
		name: "malformed ext: control byte in quoted-string",
		in:   "1;a=\"\x01\"\r\nx\r\n0;a=\"\\\x01\"\r\n\r\n",
		want: []string{
			`warn malformed chunk-ext @1`,
			`start 0 size=1 line="1;a=\"\x01\"" off=0 data=9 ext=";a=\"\x01\""`,
			data(0, "x"),
			`end 0`,
			`warn malformed chunk-ext @13`,
			`start 1 size=0 line="0;a=\"\\\x01\"" off=12 data=22 ext=";a=\"\\\x01\"" last`,
			`done @24`,
		},
	},
	{
		name: "trailers",
		in:   "0\r\nX-A: 1\r\nbad line\r\nX-B:\t2 \r\n\r\n",
		want: []string{
			`start 0 size=0 line="0" off=0 data=3 last`,
			`trailer "X-A: 1" @3`,
			`warn malformed trailer field line @11`,
			`trailer "bad line" @11`,
			`trailer "X-B:\t2 " @21`,
			`done @32`,
		},
	},
	{
		name: "junk trailer lines",
		in:   "0\r\nX : y\r\nX: a\x01b\r\n:v\r\n\r\n",
		want: []string{
			`start 0 size=0 line="0" off=0 data=3 last`,
			`warn malformed trailer field line @3`,
			`trailer "X : y" @3`,
			`warn malformed trailer field line @10`,
			`trailer "X: a\x01b" @10`,
			`warn malformed trailer field line @18`,
			`trailer ":v" @18`,
			`done @24`,
		},
	},
	{
		name: "bare LF after size line",
		in:   "3\nabc\r\n0\r\n\r\n",
		want: []string{
			`warn bare LF as line ending @1`,
			`start 0 size=3 line="3" off=0 data=2`,
			data(0, "abc"),
			`end 0`,
			`start 1 size=0 line="0" off=7 data=10 last`,
			`done @12`,
		},
	},
	{
		name: "bare LF after data",
		in:   "3\r\nabc\n0\r\n\r\n",
		want: []string{
			`start 0 size=3 line="3" off=0 data=3`,
			data(0, "abc"),
			`warn bare LF as line ending @6`,
			`end 0`,
			`start 1 size=0 line="0" off=7 data=10 last`,
			`done @12`,
		},
	},
	{
		name: "bare LF everywhere",
		in:   "3\nabc\n0\nX: y\n\n",
		want: []string{
			`warn bare LF as line ending @1`,
			`start 0 size=3 line="3" off=0 data=2`,
			data(0, "abc"),
			`warn bare LF as line ending @5`,
			`end 0`,
			`warn bare LF as line ending @7`,
			`start 1 size=0 line="0" off=6 data=8 last`,
			`warn bare LF as line ending @12`,
			`trailer "X: y" @8`,
			`warn bare LF as line ending @13`,
			`done @14`,
		},
	},
	{
		name:  "next message follows the body",
		in:    "1\r\na\r\n0\r\n\r\n",
		extra: "HTTP/1.1 200 OK\r\n\r\n",
		want: []string{
			`start 0 size=1 line="1" off=0 data=3`,
			data(0, "a"),
			`end 0`,
			`start 1 size=0 line="0" off=6 data=9 last`,
			`done @11`,
		},
	},
	{
		name:  "next message follows trailers",
		in:    "0\r\nX: y\r\n\r\n",
		extra: "0\r\n\r\n",
		want: []string{
			`start 0 size=0 line="0" off=0 data=3 last`,
			`trailer "X: y" @3`,
			`done @11`,
		},
	},
	{
		name: "line at MaxLineBytes",
		in:   "00000003\r\nabc\r\n0;a=bcde\n\r\n",
		lim:  Limits{MaxLineBytes: 8},
		want: []string{
			`start 0 size=3 line="00000003" off=0 data=10`,
			data(0, "abc"),
			`end 0`,
			`warn bare LF as line ending @23`,
			`start 1 size=0 line="0;a=bcde" off=15 data=24 ext=";a=bcde" last`,
			`done @26`,
		},
	},
	{
		name: "line at default MaxLineBytes",
		in:   strings.Repeat("0", DefaultMaxLineBytes-1) + "1\r\nx\r\n0\r\n\r\n",
		want: []string{
			fmt.Sprintf(`start 0 size=1 line=%q off=0 data=4098`, strings.Repeat("0", DefaultMaxLineBytes-1)+"1"),
			data(0, "x"),
			`end 0`,
			`start 1 size=0 line="0" off=4101 data=4104 last`,
			`done @4106`,
		},
	},
	{
		name: "trailer section at MaxTrailerBytes",
		in:   "0\r\nA: 12345678\r\n\r\n",
		lim:  Limits{MaxTrailerBytes: 15},
		want: []string{
			`start 0 size=0 line="0" off=0 data=3 last`,
			`trailer "A: 12345678" @3`,
			`done @18`,
		},
	},

	// Errors.
	{
		name: "non-hex digit",
		in:   "x\r\n",
		err:  "invalid chunk-size @0",
		n:    3,
	},
	{
		name: "non-hex digit after hex digits",
		in:   "3x\r\nabc\r\n",
		err:  "invalid chunk-size @1",
		n:    4,
	},
	{
		name: "0x prefix",
		in:   "0x3\r\nabc\r\n",
		err:  "invalid chunk-size @1",
		n:    5,
	},
	{
		name: "negative size",
		in:   "-1\r\n",
		err:  "invalid chunk-size @0",
		n:    4,
	},
	{
		name: "whitespace before size",
		in:   " 3\r\nabc\r\n",
		err:  "invalid chunk-size @0",
		n:    4,
	},
	{
		name: "non-hex digit in second chunk",
		in:   "1\r\na\r\ng\r\n",
		want: []string{`start 0 size=1 line="1" off=0 data=3`, data(0, "a"), `end 0`},
		err:  "invalid chunk-size @6",
		n:    9,
	},
	{
		name: "empty size line",
		in:   "\r\n0\r\n\r\n",
		err:  "invalid chunk-size @0",
		n:    2,
	},
	{
		name: "empty size line after a chunk",
		in:   "1\r\na\r\n\r\n",
		want: []string{`start 0 size=1 line="1" off=0 data=3`, data(0, "a"), `end 0`},
		err:  "invalid chunk-size @6",
		n:    8,
	},
	{
		name: "empty size line with bare LF",
		in:   "\n",
		want: []string{`warn bare LF as line ending @0`},
		err:  "invalid chunk-size @0",
		n:    1,
	},
	{
		name: "overflow: 2^64",
		in:   "10000000000000000\r\n",
		err:  "chunk-size overflows 63 bits @0",
		n:    19,
	},
	{
		name: "overflow: 2^63",
		in:   "8000000000000000\r\n",
		err:  "chunk-size overflows 63 bits @0",
		n:    18,
	},
	{
		name: "overflow: 2^64-1 after leading zeros",
		in:   "0000ffffffffffffffff;x=y\r\n",
		err:  "chunk-size overflows 63 bits @0",
		n:    26,
	},
	{
		name: "overflow in second chunk",
		in:   "1\r\na\r\n8000000000000000\r\n",
		want: []string{`start 0 size=1 line="1" off=0 data=3`, data(0, "a"), `end 0`},
		err:  "chunk-size overflows 63 bits @6",
		n:    24,
	},
	{
		name: "chunk longer than announced",
		in:   "3\r\nabcd\r\n0\r\n\r\n",
		want: []string{`start 0 size=3 line="3" off=0 data=3`, data(0, "abc")},
		err:  "missing CRLF after chunk data @6",
		n:    6,
	},
	{
		name: "chunk shorter than announced",
		in:   "5\r\nabc\r\n0\r\n\r\n",
		want: []string{`start 0 size=5 line="5" off=0 data=3`, data(0, "abc\r\n")},
		err:  "missing CRLF after chunk data @8",
		n:    8,
	},
	{
		name: "CR after data not followed by LF",
		in:   "3\r\nabc\rx",
		want: []string{`start 0 size=3 line="3" off=0 data=3`, data(0, "abc")},
		err:  "missing CRLF after chunk data @7",
		n:    7,
	},
	{
		// hyper's "F\rF": the CR does not end the line, so the line is
		// invalid whatever follows; reported at the CR as soon as the
		// byte after it is not LF (not only once an LF comes), so that
		// a body that ends here reports it too.
		name: "CR in size line not followed by LF",
		in:   "F\rF",
		err:  "invalid chunk-size @1",
		n:    2,
	},
	{
		name: "CR in size line not followed by LF, then CRLF",
		in:   "F\rF\r\n" + strings.Repeat("x", 0xff) + "\r\n0\r\n\r\n",
		err:  "invalid chunk-size @1",
		n:    2,
	},
	{
		name: "CR after whitespace in size line not followed by LF",
		in:   "3 \rabc",
		err:  "invalid chunk-size @2",
		n:    3,
	},
	{
		name: "CR not followed by LF in second size line",
		in:   "1\r\na\r\n1\r1\r\n",
		want: []string{`start 0 size=1 line="1" off=0 data=3`, data(0, "a"), `end 0`},
		err:  "invalid chunk-size @7",
		n:    8,
	},
	{
		// Kept well under MaxLineBytes by the early report: without it,
		// the line would run on to "chunk-size line too long".
		name: "CR not followed by LF, then no line ending",
		in:   "1\r" + strings.Repeat("1", 20),
		lim:  Limits{MaxLineBytes: 8},
		err:  "invalid chunk-size @1",
		n:    2,
	},
	{
		name: "line too long",
		in:   "000000003\r\nabc\r\n0\r\n\r\n",
		lim:  Limits{MaxLineBytes: 8},
		err:  "chunk-size line too long @0",
		n:    8,
	},
	{
		name: "line too long with bare LF",
		in:   "000000003\nabc\r\n0\r\n\r\n",
		lim:  Limits{MaxLineBytes: 8},
		err:  "chunk-size line too long @0",
		n:    8,
	},
	{
		name: "line too long after CR",
		in:   "00000003\r0\r\nabc\r\n0\r\n\r\n",
		lim:  Limits{MaxLineBytes: 8},
		err:  "chunk-size line too long @0",
		n:    9,
	},
	{
		name: "line too long in second chunk",
		in:   "1\r\na\r\n1;abcdefgh\r\nb\r\n0\r\n\r\n",
		lim:  Limits{MaxLineBytes: 8},
		want: []string{`start 0 size=1 line="1" off=0 data=3`, data(0, "a"), `end 0`},
		err:  "chunk-size line too long @6",
		n:    14,
	},
	{
		name: "line too long at default MaxLineBytes",
		in:   strings.Repeat("0", DefaultMaxLineBytes) + "1\r\nx\r\n0\r\n\r\n",
		err:  "chunk-size line too long @0",
		n:    DefaultMaxLineBytes,
	},
	{
		name: "trailer line too long",
		in:   "0\r\nX: 123456\r\n\r\n",
		lim:  Limits{MaxLineBytes: 8},
		want: []string{`start 0 size=0 line="0" off=0 data=3 last`},
		err:  "trailer section too large @3",
		n:    11,
	},
	{
		name: "trailer too large",
		in:   "0\r\nA: 12345678\r\nB: 12345678\r\n\r\n",
		lim:  Limits{MaxTrailerBytes: 16},
		want: []string{`start 0 size=0 line="0" off=0 data=3 last`, `trailer "A: 12345678" @3`},
		err:  "trailer section too large @16",
		n:    29,
	},
	{
		name: "final CRLF over MaxTrailerBytes",
		in:   "0\r\nA: 12345678\r\n\r\n",
		lim:  Limits{MaxTrailerBytes: 14},
		want: []string{`start 0 size=0 line="0" off=0 data=3 last`, `trailer "A: 12345678" @3`},
		err:  "trailer section too large @16",
		n:    18,
	},
}

// TestDecode feeds each input whole and byte at a time and compares the
// callbacks, the bytes consumed and the error with what RFC 9112 and the
// package documentation say.
func TestDecode(t *testing.T) {
	for _, tt := range decodeTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := []byte(tt.in + tt.extra)
			wantN, wantDone := tt.n, false
			if tt.err == "" {
				wantN = len(tt.in)
				wantDone = len(tt.want) > 0 && strings.HasPrefix(tt.want[len(tt.want)-1], "done")
			}
			for _, s := range []struct {
				name string
				next splitter
			}{{"whole", whole}, {"byte at a time", oneByte}} {
				got := decode(in, tt.lim, s.next)
				if d := diffLogs(got.log, tt.want); d != "" {
					t.Errorf("%s: callbacks differ at %s", s.name, d)
				}
				if got.err != tt.err {
					t.Errorf("%s: error = %q, want %q", s.name, got.err, tt.err)
				}
				if got.n != wantN {
					t.Errorf("%s: consumed %d bytes, want %d", s.name, got.n, wantN)
				}
				if got.done != wantDone {
					t.Errorf("%s: Done() = %v, want %v", s.name, got.done, wantDone)
				}
			}
		})
	}
}

// TestWriteAfterEnd checks what Write and Close return once the body is
// complete or has failed.
func TestWriteAfterEnd(t *testing.T) {
	t.Run("after done", func(t *testing.T) {
		d := NewDecoder(newRecorder(), Limits{})
		if n, err := d.Write([]byte("0\r\n\r\n")); n != 5 || err != nil {
			t.Fatalf("Write = %d, %v; want 5, nil", n, err)
		}
		if n, err := d.Write([]byte("1\r\na\r\n")); n != 0 || err != nil {
			t.Errorf("Write after done = %d, %v; want 0, nil", n, err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close = %v, want nil", err)
		}
	})
	t.Run("after error", func(t *testing.T) {
		d := NewDecoder(newRecorder(), Limits{})
		_, err := d.Write([]byte("1\r\nab\r\n"))
		if errString(err) != "missing CRLF after chunk data @4" {
			t.Fatalf("Write error = %v", err)
		}
		for _, in := range []string{"\r\n0\r\n\r\n", ""} {
			if n, err2 := d.Write([]byte(in)); n != 0 || err2 != err {
				t.Errorf("Write(%q) after error = %d, %v; want 0 and the first error", in, n, err2)
			}
		}
		if err2 := d.Close(); err2 != err {
			t.Errorf("Close = %v; want the first error", err2)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("malformed body error %v wraps io.ErrUnexpectedEOF", err)
		}
	})
}

func TestErrorString(t *testing.T) {
	e := &Error{Offset: 7, Kind: KindBadSize, Detail: `"x"`}
	if got, want := e.Error(), `at body offset 7: invalid chunk-size ("x")`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &Error{Offset: 0, Kind: KindTruncated, Err: io.ErrUnexpectedEOF}
	if got, want := e.Error(), `at body offset 0: body ended before the last chunk`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", e), io.ErrUnexpectedEOF) {
		t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = false", e)
	}
}

// TestEndInSizeLine closes the decoder right after the first bytes of a
// chunk-size line: a line that cannot become valid whatever follows (a CR
// followed by something other than LF) is reported as invalid, located at
// the CR, and Close returns that error; a line that may still end well (a
// CR at the very end may be followed by its LF) is only truncated.
func TestEndInSizeLine(t *testing.T) {
	for _, tt := range []struct {
		name     string
		in       string
		writeErr string // errString of the Write error, "" for none
		close    string // errString of Close
		detail   string // Close's Detail
	}{
		{name: "F CR F", in: "F\rF", writeErr: "invalid chunk-size @1", close: "invalid chunk-size @1",
			detail: "CR not followed by LF: byte 0x46 follows it"},
		{name: "F CR F after a chunk", in: "3\r\nabc\r\nF\rF", writeErr: "invalid chunk-size @9", close: "invalid chunk-size @9",
			detail: "CR not followed by LF: byte 0x46 follows it"},
		{name: "CR then space", in: "F\r ", writeErr: "invalid chunk-size @1", close: "invalid chunk-size @1",
			detail: "CR not followed by LF: byte 0x20 follows it"},
		{name: "F CR", in: "F\r", close: "body ended before the last chunk @2",
			detail: "inside a chunk-size line (2 bytes read; the last is a CR, its LF did not come)"},
		{name: "lone CR", in: "\r", close: "body ended before the last chunk @1",
			detail: "inside a chunk-size line (1 bytes read; the last is a CR, its LF did not come)"},
		{name: "F CR after a chunk", in: "3\r\nabc\r\nF\r", close: "body ended before the last chunk @10",
			detail: "inside a chunk-size line (2 bytes read; the last is a CR, its LF did not come)"},
		{name: "F", in: "F", close: "body ended before the last chunk @1",
			detail: "inside a chunk-size line (1 bytes read)"},
		{name: "CR inside chunk-ext", in: "F;a\rb", close: "body ended before the last chunk @5",
			detail: "inside a chunk-size line (5 bytes read)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range []struct {
				name string
				next splitter
			}{{"whole", whole}, {"byte at a time", oneByte}} {
				got := decode([]byte(tt.in), Limits{}, s.next)
				if got.err != tt.writeErr {
					t.Errorf("%s: Write error = %q, want %q", s.name, got.err, tt.writeErr)
				}
				if errString(got.close) != tt.close {
					t.Errorf("%s: Close = %q, want %q", s.name, errString(got.close), tt.close)
				}
				var e *Error
				if errors.As(got.close, &e) && e.Detail != tt.detail {
					t.Errorf("%s: Close detail = %q, want %q", s.name, e.Detail, tt.detail)
				}
				truncated := strings.HasPrefix(tt.close, KindTruncated)
				if errors.Is(got.close, io.ErrUnexpectedEOF) != truncated {
					t.Errorf("%s: Close = %v wraps io.ErrUnexpectedEOF: %v, want %v", s.name, got.close, !truncated, truncated)
				}
			}
		})
	}
}

// validBodies returns the complete bodies of decodeTests, without the bytes
// that follow them.
func validBodies() map[string][]byte {
	m := make(map[string][]byte)
	for _, tt := range decodeTests {
		if tt.err == "" && len(tt.want) > 0 && strings.HasPrefix(tt.want[len(tt.want)-1], "done") {
			m[tt.name] = []byte(tt.in)
		}
	}
	return m
}

// TestTruncation feeds every prefix of valid bodies and closes the decoder:
// each proper prefix is an unexpected EOF located at its end, the full body is
// not.
func TestTruncation(t *testing.T) {
	for name, body := range validBodies() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := 0; i <= len(body); i++ {
				d := NewDecoder(newRecorder(), Limits{})
				if n, err := d.Write(body[:i]); n != i || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", body[:i], n, err, i)
				}
				err := d.Close()
				if i == len(body) {
					if err != nil || !d.Done() {
						t.Errorf("full body: Close = %v, Done = %v; want nil, true", err, d.Done())
					}
					continue
				}
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("prefix %q: Close = %v; want an *Error wrapping io.ErrUnexpectedEOF", body[:i], err)
				}
				if e.Kind != KindTruncated || e.Offset != int64(i) {
					t.Errorf("prefix %q: Close = %q @%d; want %q @%d", body[:i], e.Kind, e.Offset, KindTruncated, i)
				}
				if d.Done() {
					t.Errorf("prefix %q: Done() = true", body[:i])
				}
			}
		})
	}
}

// TestSplitInvariance checks that how the input is split across Writes
// changes nothing but how data is split across Data calls.
func TestSplitInvariance(t *testing.T) {
	inputs := map[string][]byte{
		"generated": generatedBody(rand.New(rand.NewSource(1)), 200),
	}
	for _, tt := range decodeTests {
		inputs[tt.name] = []byte(tt.in + tt.extra)
	}
	lims := map[string]Limits{}
	for _, tt := range decodeTests {
		lims[tt.name] = tt.lim
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lim := lims[name]
			want := decode(in, lim, whole)
			splits := map[string]splitter{"byte at a time": oneByte}
			for seed := int64(1); seed <= 20; seed++ {
				splits[fmt.Sprintf("seed %d", seed)] = randomSplits(seed)
			}
			for sname, next := range splits {
				got := decode(in, lim, next)
				if d := diffLogs(got.log, want.log); d != "" {
					t.Errorf("%s: callbacks differ from whole input at %s", sname, d)
				}
				if got.err != want.err || got.n != want.n || got.done != want.done {
					t.Errorf("%s: got n=%d err=%q done=%v; whole input gave n=%d err=%q done=%v",
						sname, got.n, got.err, got.done, want.n, want.err, want.done)
				}
			}
		})
	}
}

// generatedBody returns a valid body of n chunks of random sizes, some with
// chunk-ext, followed by trailers.
func generatedBody(rng *rand.Rand, n int) []byte {
	// Data with CR, LF and hex digits, to look like framing.
	const alphabet = "0123456789\r\n{}\":abcdef"
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		size := 1 + rng.Intn(2000)
		switch rng.Intn(4) {
		case 0:
			fmt.Fprintf(&b, "%X;i=%d\r\n", size, i)
		case 1:
			fmt.Fprintf(&b, "%08x ; q=\"a\\\"b\"\r\n", size)
		default:
			fmt.Fprintf(&b, "%x\r\n", size)
		}
		for j := 0; j < size; j++ {
			b.WriteByte(alphabet[rng.Intn(len(alphabet))])
		}
		b.WriteString("\r\n")
	}
	b.WriteString("0\r\nX-Checksum: abc\r\nX-Count: 200\r\n\r\n")
	return b.Bytes()
}

// TestSkip checks Skip within chunk data, which keeps framing, and across a
// chunk boundary, after which the decoder resynchronises on the next
// "\r\nHEX\r\n".
func TestSkip(t *testing.T) {
	// Chunk 0 is at 0 (data 3-7), chunk 1 at 10 (data 13-17), chunk 2 at 20
	// (data 23-25), the last-chunk at 28; the body ends at 33.
	const body = "5\r\nhello\r\n5\r\nworld\r\n3\r\nabc\r\n0\r\n\r\n"
	tests := []struct {
		name       string
		before     int   // bytes written before the gap
		gap        int64 // bytes skipped
		keep       bool  // Skip's result
		resyncing  bool  // Resyncing() after Skip
		want       []string
		wantChunks int
	}{
		{
			name: "inside data", before: 4, gap: 2, keep: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "hlo"),
				`end 0`,
				`start 1 size=5 line="5" off=10 data=13`,
				data(1, "world"),
				`end 1`,
				`start 2 size=3 line="3" off=20 data=23`,
				data(2, "abc"),
				`end 2`,
				`start 3 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 4,
		},
		{
			name: "rest of data", before: 4, gap: 4, keep: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "h"),
				`end 0`,
				`start 1 size=5 line="5" off=10 data=13`,
				data(1, "world"),
				`end 1`,
				`start 2 size=3 line="3" off=20 data=23`,
				data(2, "abc"),
				`end 2`,
				`start 3 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 4,
		},
		{
			name: "whole data", before: 3, gap: 5, keep: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				`end 0`,
				`start 1 size=5 line="5" off=10 data=13`,
				data(1, "world"),
				`end 1`,
				`start 2 size=3 line="3" off=20 data=23`,
				data(2, "abc"),
				`end 2`,
				`start 3 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 4,
		},
		{
			// The gap hides chunk 1's size line; the decoder finds
			// chunk 2 from the CRLF that ends chunk 1's data. It
			// numbers chunks as it sees them, so chunk 2 gets index 1.
			name: "across a chunk boundary", before: 4, gap: 12, resyncing: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "h"),
				`start 1 size=3 line="3" off=20 data=23`,
				data(1, "abc"),
				`end 1`,
				`start 2 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 3,
		},
		{
			// The gap ends exactly at chunk 1's size line (a lost
			// segment that held the rest of chunk 0): the size line at
			// the first byte after the gap is taken.
			name: "ending at a size line", before: 4, gap: 6, resyncing: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "h"),
				`start 1 size=5 line="5" off=10 data=13`,
				data(1, "world"),
				`end 1`,
				`start 2 size=3 line="3" off=20 data=23`,
				data(2, "abc"),
				`end 2`,
				`start 3 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 4,
		},
		{
			// The gap ends inside the CRLF after chunk 0: the resync
			// needs a whole CRLF before the hex digits, so chunk 1 is
			// lost too and the decoder picks up at chunk 2.
			name: "into the CRLF after data", before: 4, gap: 5, resyncing: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "h"),
				`start 1 size=3 line="3" off=20 data=23`,
				data(1, "abc"),
				`end 1`,
				`start 2 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 3,
		},
		{
			name: "inside a size line", before: 11, gap: 1, resyncing: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "hello"),
				`end 0`,
				`start 1 size=3 line="3" off=20 data=23`,
				data(1, "abc"),
				`end 1`,
				`start 2 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 3,
		},
		{
			// Resync finds the last-chunk and the body still ends.
			name: "into the last chunk's data", before: 4, gap: 22, resyncing: true,
			want: []string{
				`start 0 size=5 line="5" off=0 data=3`,
				data(0, "h"),
				`start 1 size=0 line="0" off=28 data=31 last`,
				`done @33`,
			},
			wantChunks: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range []struct {
				name string
				next splitter
			}{{"whole", whole}, {"byte at a time", oneByte}} {
				rec := newRecorder()
				d := NewDecoder(rec, Limits{})
				if n, err := d.Write([]byte(body[:tt.before])); n != tt.before || err != nil {
					t.Fatalf("Write before the gap = %d, %v", n, err)
				}
				keep := d.Skip(tt.gap)
				if keep != tt.keep {
					t.Errorf("Skip(%d) = %v, want %v", tt.gap, keep, tt.keep)
				}
				if !keep {
					rec.lost()
				}
				if d.Resyncing() != tt.resyncing {
					t.Errorf("Resyncing() = %v after Skip, want %v", d.Resyncing(), tt.resyncing)
				}
				if got := d.Offset(); got != int64(tt.before)+tt.gap {
					t.Errorf("Offset() = %d after Skip, want %d", got, int64(tt.before)+tt.gap)
				}
				rest := []byte(body[tt.before+int(tt.gap):])
				for len(rest) > 0 {
					k := s.next(len(rest))
					n, err := d.Write(rest[:k])
					if n != k || err != nil {
						t.Fatalf("%s: Write after the gap = %d, %v; want %d, nil", s.name, n, err, k)
					}
					rest = rest[k:]
				}
				if err := d.Close(); err != nil {
					t.Errorf("%s: Close = %v", s.name, err)
				}
				if d := diffLogs(rec.lines(), tt.want); d != "" {
					t.Errorf("%s: callbacks differ at %s", s.name, d)
				}
				if d.Chunks() != tt.wantChunks {
					t.Errorf("%s: Chunks() = %d, want %d", s.name, d.Chunks(), tt.wantChunks)
				}
			}
		})
	}
}

// TestSkipInData checks InData before and after a Skip inside chunk data.
func TestSkipInData(t *testing.T) {
	d := NewDecoder(newRecorder(), Limits{})
	d.Write([]byte("a\r\n01"))
	if in, remain := d.InData(); !in || remain != 8 {
		t.Fatalf("InData() = %v, %d; want true, 8", in, remain)
	}
	if !d.Skip(3) {
		t.Fatal("Skip(3) inside data = false")
	}
	if in, remain := d.InData(); !in || remain != 5 {
		t.Errorf("InData() after Skip(3) = %v, %d; want true, 5", in, remain)
	}
	if !d.Skip(0) || !d.Skip(-1) {
		t.Error("Skip of no bytes = false")
	}
	if err := d.Close(); errString(err) != "body ended before the last chunk @8" {
		t.Errorf("Close = %v, want truncation at 8", err)
	}
}

// TestSkipAfterEnd checks that Skip neither revives a failed decoder nor
// restarts a complete one.
func TestSkipAfterEnd(t *testing.T) {
	t.Run("after error", func(t *testing.T) {
		d := NewDecoder(newRecorder(), Limits{})
		_, err := d.Write([]byte("zz\r\n"))
		if err == nil {
			t.Fatal("no error for a bad chunk-size")
		}
		if d.Skip(10) {
			t.Error("Skip after an error = true")
		}
		if n, err2 := d.Write([]byte("\r\n1\r\na\r\n0\r\n\r\n")); n != 0 || err2 != err {
			t.Errorf("Write after Skip after error = %d, %v; want 0 and the first error %v", n, err2, err)
		}
		if err2 := d.Close(); err2 != err {
			t.Errorf("Close = %v, want the first error %v", err2, err)
		}
	})
	t.Run("after done", func(t *testing.T) {
		rec := newRecorder()
		d := NewDecoder(rec, Limits{})
		d.Write([]byte("0\r\n\r\n"))
		d.Skip(10)
		if n, err := d.Write([]byte("\r\n1\r\na\r\n0\r\n\r\n")); n != 0 || err != nil {
			t.Errorf("Write after Skip after done = %d, %v; want 0, nil", n, err)
		}
		if !d.Done() || d.Close() != nil {
			t.Errorf("Done() = %v, Close() = %v after Skip; want true, nil", d.Done(), d.Close())
		}
		if d := diffLogs(rec.lines(), []string{`start 0 size=0 line="0" off=0 data=3 last`, `done @5`}); d != "" {
			t.Errorf("callbacks differ at %s", d)
		}
	})
}

// nopHandler discards every callback.
type nopHandler struct{}

func (nopHandler) ChunkStart(*Chunk)     {}
func (nopHandler) Data(*Chunk, []byte)   {}
func (nopHandler) ChunkEnd(*Chunk)       {}
func (nopHandler) Trailer([]byte, int64) {}
func (nopHandler) Done(int64)            {}
func (nopHandler) Warning(*Error)        {}

// TestAllocs checks that decoding allocates nothing per chunk once the
// decoder is running: chunks are reported from the decoder's own buffers.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in short mode")
	}
	data := strings.Repeat("x", 0x3aa)
	for _, tt := range []struct {
		name  string
		chunk string
		cuts  []int // Write boundaries inside the chunk
	}{
		{"watch-like chunk", "3aa\r\n" + data + "\r\n", nil},
		{"split chunk", "3aa\r\n" + data + "\r\n", []int{2, 5, 100, 0x3aa + 6}},
		{"chunk-ext", "3aa;name=\"v\\\"al\";x\r\n" + data + "\r\n", nil},
		{"tiny chunk", "1\r\nx\r\n", nil},
		{"long size line", strings.Repeat("0", 1000) + "1\r\nx\r\n", []int{500}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			chunk := []byte(tt.chunk)
			var pieces [][]byte
			prev := 0
			for _, c := range append(tt.cuts, len(chunk)) {
				pieces = append(pieces, chunk[prev:c])
				prev = c
			}
			d := NewDecoder(nopHandler{}, Limits{})
			// The first chunk may grow the line buffer.
			d.Write(chunk)
			allocs := testing.AllocsPerRun(1000, func() {
				for _, p := range pieces {
					if n, err := d.Write(p); n != len(p) || err != nil {
						t.Fatalf("Write = %d, %v", n, err)
					}
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per chunk, want 0", allocs)
			}
		})
	}
}

// TestSkipHexDataAfterGap shows a known limit of resynchronisation: chunk
// data that starts with hex digits and CRLF right after the gap ("bc\r\n")
// reads as a size line; the body then looks truncated inside that chunk.
func TestSkipHexDataAfterGap(t *testing.T) {
	const body = "5\r\nhello\r\n5\r\nworld\r\n3\r\nabc\r\n0\r\n\r\n"
	rec := newRecorder()
	d := NewDecoder(rec, Limits{})
	if _, err := d.Write([]byte(body[:4])); err != nil {
		t.Fatal(err)
	}
	if d.Skip(20) {
		t.Fatal("Skip across chunk boundaries kept framing")
	}
	if _, err := d.Write([]byte(body[24:])); err != nil {
		t.Fatal(err)
	}
	err := d.Close()
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != KindTruncated || ce.Detail != "inside chunk 1: 5 of 188 data bytes" {
		t.Fatalf("Close = %v", err)
	}
}
