// Package chunk decodes the chunked transfer coding of HTTP/1.1 (RFC 9112 §7.1)
// incrementally and reports every chunk it reads: its chunk-size in bytes, the
// chunk-size line exactly as it travelled on the wire (hex digits and any
// chunk-ext), its byte offset in the message body, and the trailer section
// that follows the last chunk.
//
// The standard library's reader (net/http/internal, httputil.NewChunkedReader)
// hides all of this and rejects some input that RFC 9112 allows (whitespace
// before ";", more than 16 hex digits of leading zeros); this decoder exists
// because showing the framing is kwatch's product.
//
// The Decoder is push-based: the caller hands it bytes in any split (a TCP
// segment, a read, a single byte) with Write, and it calls a Handler for each
// piece of framing it recognises. Every buffer it keeps is bounded by Limits.
//
// Rules, each with its source:
//   - chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF (RFC 9112 §7.1).
//   - chunk-size = 1*HEXDIG, upper or lower case, any number of leading zeros
//     (RFC 9112 §7.1, RFC 5234 B.1). The value must fit in 63 bits; a larger
//     value is rejected as an overflow, never wrapped.
//   - chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ), value a token or
//     quoted-string (RFC 9112 §7.1.1). An extension that does not parse is
//     reported as a Warning and ignored, as the RFC tells recipients to ignore
//     extensions they do not understand; the chunk-size is still unambiguous.
//   - Whitespace after the chunk-size that is not followed by ";" is not in the
//     grammar; it is accepted with a Warning, because some servers send it and
//     the size is unambiguous.
//   - last-chunk = 1*("0") [ chunk-ext ] CRLF, then the trailer section
//     *( field-line CRLF ) and a final CRLF (RFC 9112 §7.1.2).
//   - Bare LF as a line terminator: chunked framing requires CRLF. RFC 9112
//     §2.2 lets a recipient accept a bare LF in the start-line and field
//     lines (so in trailer lines), not explicitly in chunk-size lines or after
//     chunk data; Go's reader refuses it there since CVE-2025-22871, because a
//     proxy and a server that disagree on it can be smuggled past. This is
//     kwatch's choice, not the RFC's: kwatch only observes traffic, so it
//     decodes leniently (a bare LF ends the line) and reports every bare LF as
//     a Warning, so that the disagreement is visible rather than hidden.
//   - After lost bytes (Skip across a chunk boundary) the decoder looks for
//     the next size line: CRLF, 1 to 8 hex digits, CRLF, or hex digits and
//     CRLF as the very first bytes after the gap. Chunk data that happens to
//     look like that is mistaken for a size line; indexes then count the
//     chunks seen, not the chunks sent.
//   - A CR not followed by LF (a bare CR) is not a line ending (RFC 9112
//     §2.2: the element that holds it is invalid). In a chunk-size line
//     before any chunk-ext it makes the chunk-size invalid whatever follows,
//     so it is reported as soon as the byte after the CR is read, not when a
//     line ending comes (as hyper reports "F\rF"): a body that ends or
//     stalls right after it still shows why it could not be framed. A CR as
//     the very last byte read may still be followed by its LF: that is only
//     a truncated line. A bare CR inside chunk-ext makes the extension
//     malformed (a Warning, see above), and in a trailer field line the
//     field line (a Warning too).
//   - A chunk-data section not followed by CRLF (or bare LF) is an error: the
//     chunk was shorter or longer than its chunk-size announced.
package chunk

import (
	"bytes"
	"fmt"
	"io"
)

// Limits bounds the bytes the Decoder buffers. The zero value of a field means
// its default.
type Limits struct {
	// MaxLineBytes is the longest chunk-size line or trailer field line, in
	// bytes, without its line ending. Default 4096 bytes, the limit Go's
	// net/http applies to a chunk-size line.
	MaxLineBytes int
	// MaxTrailerBytes is the largest trailer section, in bytes, counting line
	// endings. Default 65536 bytes.
	MaxTrailerBytes int
}

// DefaultMaxLineBytes is the default of Limits.MaxLineBytes, in bytes.
const DefaultMaxLineBytes = 4096

// DefaultMaxTrailerBytes is the default of Limits.MaxTrailerBytes, in bytes.
const DefaultMaxTrailerBytes = 64 << 10

func (l Limits) withDefaults() Limits {
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = DefaultMaxLineBytes
	}
	if l.MaxTrailerBytes <= 0 {
		l.MaxTrailerBytes = DefaultMaxTrailerBytes
	}
	return l
}

// Chunk describes one chunk as read from the wire (RFC 9112 §7.1).
//
// Byte slices in a Chunk alias the Decoder's buffer and are valid only during
// the Handler call that receives the Chunk; copy what you keep.
type Chunk struct {
	// Index is the chunk's number in the body, from 0; the last-chunk has
	// the next number after the last data chunk.
	Index int
	// Size is the chunk-size: the number of data bytes the chunk carries.
	// It is 0 for the last-chunk.
	Size int64
	// Line is the chunk-size line as on the wire, without its line ending:
	// hex digits, then any whitespace and chunk-ext, e.g. "3aa" or "1A ;x=y".
	Line []byte
	// Ext is the chunk-ext part of Line, from the first whitespace or ";"
	// after the hex digits; empty when there is none.
	Ext []byte
	// Header is the chunk-size line with its line ending exactly as on the
	// wire, e.g. "3aa\r\n" (the bytes 33 61 61 0d 0a).
	Header []byte
	// Offset is the byte offset of the chunk-size line's first byte from the
	// start of the message body.
	Offset int64
	// DataOffset is the byte offset of the first chunk-data byte from the
	// start of the message body (Offset + len(Header)).
	DataOffset int64
	// Last reports whether this is the last-chunk (RFC 9112 §7.1.2).
	Last bool
}

// Handler receives what the Decoder reads, in wire order. The Decoder calls
// ChunkStart once per chunk (including the last-chunk), Data zero or more
// times with that chunk's data, ChunkEnd after the CRLF that ends the data,
// Trailer for each trailer field line, and Done after the final CRLF of the
// message. Warning reports input that breaks RFC 9112 but was decoded.
type Handler interface {
	// ChunkStart is called when a chunk-size line has been read.
	ChunkStart(c *Chunk)
	// Data is called with chunk-data bytes of the current chunk; p aliases
	// the caller's buffer and is valid only during the call.
	Data(c *Chunk, p []byte)
	// ChunkEnd is called when the line ending after the chunk data has been
	// read. It is not called for the last-chunk.
	ChunkEnd(c *Chunk)
	// Trailer is called with each trailer field line, without its line
	// ending; line is valid only during the call.
	Trailer(line []byte, offset int64)
	// Done is called once the final line ending of the trailer section has
	// been read: the body is complete.
	Done(offset int64)
	// Warning reports a deviation from RFC 9112 that was decoded anyway.
	Warning(err *Error)
}

// Error is a problem found in a chunked body, located by its byte offset from
// the start of the body. Kind is a short stable wording (e.g. "chunk-size
// overflows 63 bits"); Detail adds the values seen.
type Error struct {
	// Offset is the byte offset from the start of the body where the
	// problem was found.
	Offset int64
	// Kind is the stable one-line wording of the problem, lowercase.
	Kind string
	// Detail gives the values involved; may be empty.
	Detail string
	// Err is io.ErrUnexpectedEOF when the body ended early, otherwise nil.
	Err error
}

// Error formats the problem as "at body offset N: kind (detail)".
func (e *Error) Error() string {
	s := fmt.Sprintf("at body offset %d: %s", e.Offset, e.Kind)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Unwrap returns io.ErrUnexpectedEOF for a truncated body, otherwise nil.
func (e *Error) Unwrap() error { return e.Err }

// Problem kinds reported by the Decoder, as stable wording.
const (
	KindBadSize     = "invalid chunk-size"
	KindOverflow    = "chunk-size overflows 63 bits"
	KindLineTooLong = "chunk-size line too long"
	KindMissingCRLF = "missing CRLF after chunk data"
	KindBareLF      = "bare LF as line ending"
	KindBadExt      = "malformed chunk-ext"
	KindSizeSpace   = "whitespace after chunk-size"
	KindTrailerLong = "trailer section too large"
	KindBadTrailer  = "malformed trailer field line"
	KindTruncated   = "body ended before the last chunk"
)

type state uint8

const (
	stSizeLine state = iota // reading a chunk-size line into line
	stData                  // reading chunk data; remain bytes left
	stDataCR                // expecting CR (or bare LF) after data
	stDataLF                // expecting LF after CR after data
	stTrailer               // reading trailer field lines
	stDone                  // body complete
	stResync                // looking for the next chunk-size line after lost bytes
	stFailed                // a fatal error was returned
)

// Decoder decodes one chunked message body. Create it with NewDecoder; it is
// not safe for concurrent use.
type Decoder struct {
	h         Handler
	lim       Limits
	st        state
	off       int64 // body offset of the next byte to be consumed
	line      []byte
	lineOff   int64 // body offset of line[0]
	remain    int64 // data bytes left in the current chunk
	cur       Chunk
	index     int
	trailer   int // bytes of trailer section so far
	err       *Error
	discarded int64 // bytes passed over while looking for a size line
	// resyncFresh: no byte since the gap has left the resync window, so a
	// size line may start at the window's first byte.
	resyncFresh bool
}

// NewDecoder returns a Decoder that reports to h, with the given limits (the
// zero Limits means the defaults).
func NewDecoder(h Handler, lim Limits) *Decoder {
	lim = lim.withDefaults()
	return &Decoder{h: h, lim: lim, line: make([]byte, 0, 64)}
}

// Offset returns the number of body bytes consumed so far.
func (d *Decoder) Offset() int64 { return d.off }

// Done reports whether the body is complete (the last-chunk and the trailer
// section have been read).
func (d *Decoder) Done() bool { return d.st == stDone }

// InData reports whether the decoder is inside chunk data, and how many data
// bytes the current chunk still expects.
func (d *Decoder) InData() (bool, int64) { return d.st == stData, d.remain }

// Chunks returns the number of chunks started so far, the last-chunk included.
func (d *Decoder) Chunks() int { return d.index }

// Write decodes p. It returns the number of bytes of p that belong to the
// body: less than len(p) only when the body ended inside p (the rest belongs
// to whatever follows on the connection) or on error. The error, if any, is
// an *Error locating the problem; after an error every later Write returns
// the same error.
func (d *Decoder) Write(p []byte) (int, error) {
	if d.st == stFailed {
		return 0, d.err
	}
	n := 0
	for n < len(p) && d.st != stDone {
		switch d.st {
		case stData:
			k := int64(len(p) - n)
			if k > d.remain {
				k = d.remain
			}
			d.h.Data(&d.cur, p[n:n+int(k)])
			n += int(k)
			d.off += k
			d.remain -= k
			if d.remain == 0 {
				d.st = stDataCR
			}
		case stDataCR:
			switch p[n] {
			case '\r':
				d.st = stDataLF
			case '\n':
				d.h.Warning(&Error{Offset: d.off, Kind: KindBareLF, Detail: "after chunk data"})
				d.endChunk()
			default:
				return n, d.fail(&Error{Offset: d.off, Kind: KindMissingCRLF,
					Detail: fmt.Sprintf("chunk %d announced %d bytes; byte 0x%02x follows them", d.cur.Index, d.cur.Size, p[n])})
			}
			n++
			d.off++
		case stDataLF:
			if p[n] != '\n' {
				return n, d.fail(&Error{Offset: d.off, Kind: KindMissingCRLF,
					Detail: fmt.Sprintf("CR after chunk %d data is followed by 0x%02x, not LF", d.cur.Index, p[n])})
			}
			n++
			d.off++
			d.endChunk()
		case stResync:
			n += d.resync(p[n:])
		case stSizeLine, stTrailer:
			k, err := d.readLine(p[n:])
			n += k
			if err != nil {
				return n, d.fail(err)
			}
		}
	}
	return n, nil
}

func (d *Decoder) endChunk() {
	d.h.ChunkEnd(&d.cur)
	d.st = stSizeLine
}

// readLine accumulates bytes of a line into d.line. It returns the bytes of
// p consumed; when a line ending was found it processes the line.
func (d *Decoder) readLine(p []byte) (int, *Error) {
	if len(d.line) == 0 {
		d.lineOff = d.off
	}
	// cr: the byte before b was a CR.
	cr := len(d.line) > 0 && d.line[len(d.line)-1] == '\r'
	for i, b := range p {
		if b == '\n' {
			d.line = append(d.line, b)
			d.off += int64(i + 1)
			err := d.lineDone()
			d.line = d.line[:0]
			return i + 1, err
		}
		// The line, without its ending, may hold MaxLineBytes bytes; one
		// more byte is allowed only if it is a CR, which may start the
		// CRLF. (A bare LF after MaxLineBytes+1 bytes must not pass.)
		if len(d.line) > d.lim.MaxLineBytes || len(d.line) == d.lim.MaxLineBytes && b != '\r' {
			d.off += int64(i)
			kind := KindLineTooLong
			if d.st == stTrailer {
				kind = KindTrailerLong
			}
			return i, &Error{Offset: d.lineOff, Kind: kind,
				Detail: fmt.Sprintf("more than %d bytes without a line ending", d.lim.MaxLineBytes)}
		}
		// A CR followed by b, not LF: a size line that holds it is
		// invalid however it goes on, unless the CR is inside chunk-ext
		// (RFC 9112 §2.2), after a ";". Without one, scanSize fails on
		// the line so far: at the CR, or at an earlier byte that made
		// the line invalid already. The CR is consumed, b is not, as
		// after chunk data.
		if cr && d.st == stSizeLine && bytes.IndexByte(d.line, ';') < 0 {
			if _, _, err := scanSize(d.line, d.lineOff); err != nil {
				if err.Kind == KindBadSize && err.Offset == d.lineOff+int64(len(d.line)-1) {
					err.Detail = fmt.Sprintf("CR not followed by LF: byte 0x%02x follows it", b)
				}
				d.off += int64(i)
				return i, err
			}
		}
		cr = b == '\r'
		d.line = append(d.line, b)
	}
	d.off += int64(len(p))
	return len(p), nil
}

// lineDone handles a complete line (with its ending) in d.line.
func (d *Decoder) lineDone() *Error {
	full := d.line
	body := full[:len(full)-1]
	if len(body) > 0 && body[len(body)-1] == '\r' {
		body = body[:len(body)-1]
	} else {
		d.h.Warning(&Error{Offset: d.lineOff + int64(len(full)-1), Kind: KindBareLF, Detail: d.lineName()})
	}
	if d.st == stTrailer {
		return d.trailerLine(full, body)
	}
	return d.sizeLine(full, body)
}

func (d *Decoder) lineName() string {
	if d.st == stTrailer {
		return "in trailer section"
	}
	return "after chunk-size line"
}

func isHex(b byte) (byte, bool) {
	switch {
	case '0' <= b && b <= '9':
		return b - '0', true
	case 'a' <= b && b <= 'f':
		return b - 'a' + 10, true
	case 'A' <= b && b <= 'F':
		return b - 'A' + 10, true
	}
	return 0, false
}

// scanSize reads the chunk-size at the start of line, a chunk-size line
// without its line ending that starts at body offset off (RFC 9112 §7.1):
// 1*HEXDIG, then either nothing or whitespace and chunk-ext. It returns the
// size and the index of the first byte after the hex digits. The error it
// returns depends only on the bytes up to the first one after the digits and
// any whitespace that is not ";", so it holds for every line that starts
// with those bytes: readLine uses that to report a bare CR before the line
// ends.
func scanSize(line []byte, off int64) (int64, int, *Error) {
	var size int64
	i := 0
	sig := 0 // significant hex digits (after leading zeros)
	for ; i < len(line); i++ {
		v, ok := isHex(line[i])
		if !ok {
			break
		}
		if sig > 0 || v != 0 {
			sig++
		}
		// 15 hex digits always fit in 63 bits; a 16th fits only when the
		// value so far is below 2^59.
		if sig > 16 || (sig == 16 && size >= 1<<59) {
			return 0, i, &Error{Offset: off, Kind: KindOverflow, Detail: fmt.Sprintf("%q", truncate(line))}
		}
		size = size<<4 | int64(v)
	}
	if i == 0 {
		detail := fmt.Sprintf("%q", truncate(line))
		if len(line) == 0 {
			detail = "empty line where a chunk-size was expected"
		}
		return 0, i, &Error{Offset: off, Kind: KindBadSize, Detail: detail}
	}
	// Whitespace after the digits may only lead to ";" (BWS before
	// chunk-ext) or to the end of the line (checkExt warns about it).
	j := i
	for j < len(line) && (line[j] == ' ' || line[j] == '\t') {
		j++
	}
	if j < len(line) && line[j] != ';' {
		return 0, i, &Error{Offset: off + int64(j), Kind: KindBadSize,
			Detail: fmt.Sprintf("byte %q after the hex digits", line[j])}
	}
	return size, i, nil
}

// sizeLine parses a chunk-size line (RFC 9112 §7.1).
func (d *Decoder) sizeLine(full, line []byte) *Error {
	size, i, err := scanSize(line, d.lineOff)
	if err != nil {
		return err
	}
	ext := line[i:]
	d.checkExt(ext, d.lineOff+int64(i))
	// Set the fields one by one: a composite literal is built on the
	// stack and copied, and the copy's wide loads of the narrow stores
	// just made stall the CPU (a third of the time on 1-byte chunks).
	c := &d.cur
	c.Index = d.index
	c.Size = size
	c.Line = line
	c.Ext = ext
	c.Header = full
	c.Offset = d.lineOff
	c.DataOffset = d.lineOff + int64(len(full))
	c.Last = size == 0
	d.index++
	d.h.ChunkStart(&d.cur)
	// Slices must not outlive the callback; clear them so that later
	// callbacks do not see stale bytes.
	d.cur.Line, d.cur.Ext, d.cur.Header = nil, nil, nil
	if size == 0 {
		d.st = stTrailer
		d.trailer = 0
		return nil
	}
	d.remain = size
	d.st = stData
	return nil
}

// checkExt validates chunk-ext (RFC 9112 §7.1.1), what follows the hex
// digits once scanSize has accepted them: whitespace alone, or whitespace
// and ";". Whitespace alone and a malformed extension after ";" are
// warnings.
func (d *Decoder) checkExt(ext []byte, off int64) {
	if len(ext) == 0 {
		return
	}
	i := 0
	for i < len(ext) && (ext[i] == ' ' || ext[i] == '\t') {
		i++
	}
	if i == len(ext) {
		d.h.Warning(&Error{Offset: off, Kind: KindSizeSpace, Detail: "decoded as if absent"})
		return
	}
	if !validExt(ext[i:]) {
		d.h.Warning(&Error{Offset: off + int64(i), Kind: KindBadExt, Detail: fmt.Sprintf("%q ignored", truncate(ext[i:]))})
	}
}

// chunksText says "1 chunk" or "N chunks".
func chunksText(n int) string {
	if n == 1 {
		return "1 chunk"
	}
	return fmt.Sprintf("%d chunks", n)
}

// validExt reports whether s matches *( BWS ";" BWS token [ BWS "=" BWS
// ( token / quoted-string ) ] ) with trailing BWS allowed.
func validExt(s []byte) bool {
	i := 0
	ws := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	for {
		ws()
		if i == len(s) {
			return true
		}
		if s[i] != ';' {
			return false
		}
		i++
		ws()
		start := i
		for i < len(s) && isTchar(s[i]) {
			i++
		}
		if i == start {
			return false
		}
		ws()
		if i < len(s) && s[i] == '=' {
			i++
			ws()
			if i < len(s) && s[i] == '"' {
				i++
				closed := false
				for i < len(s) {
					c := s[i]
					if c == '\\' && i+1 < len(s) {
						// quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
						if q := s[i+1]; q < 0x20 && q != '\t' || q == 0x7f {
							return false
						}
						i += 2
						continue
					}
					i++
					if c == '"' {
						closed = true
						break
					}
					if c < 0x20 && c != '\t' || c == 0x7f {
						return false
					}
				}
				if !closed {
					return false
				}
			} else {
				start := i
				for i < len(s) && isTchar(s[i]) {
					i++
				}
				if i == start {
					return false
				}
			}
		}
	}
}

// isTchar reports whether b is a token character (RFC 9110 §5.6.2).
func isTchar(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	switch b {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// trailerLine handles one line of the trailer section (RFC 9112 §7.1.2).
func (d *Decoder) trailerLine(full, line []byte) *Error {
	d.trailer += len(full)
	if d.trailer > d.lim.MaxTrailerBytes {
		return &Error{Offset: d.lineOff, Kind: KindTrailerLong,
			Detail: fmt.Sprintf("more than %d bytes", d.lim.MaxTrailerBytes)}
	}
	if len(line) == 0 {
		d.st = stDone
		d.h.Done(d.off)
		return nil
	}
	if !ValidFieldLine(line) {
		d.h.Warning(&Error{Offset: d.lineOff, Kind: KindBadTrailer, Detail: fmt.Sprintf("%q", truncate(line))})
	}
	d.h.Trailer(line, d.lineOff)
	return nil
}

// ValidFieldLine reports whether line is field-name ":" OWS field-value OWS
// (RFC 9112 §5): a name of token characters, a colon, a value.
func ValidFieldLine(line []byte) bool {
	i := 0
	for i < len(line) && isTchar(line[i]) {
		i++
	}
	if i == 0 || i == len(line) || line[i] != ':' {
		return false
	}
	for _, c := range line[i+1:] {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func (d *Decoder) fail(err *Error) *Error {
	d.st = stFailed
	d.err = err
	return err
}

// Close reports how the body ended when its connection or capture ends. It
// returns nil when the body was complete, otherwise an *Error wrapping
// io.ErrUnexpectedEOF that says where inside the framing the bytes stopped.
// A decoder that already failed returns its error.
func (d *Decoder) Close() error {
	switch d.st {
	case stDone:
		return nil
	case stFailed:
		return d.err
	case stData:
		return &Error{Offset: d.off, Kind: KindTruncated, Err: io.ErrUnexpectedEOF,
			Detail: fmt.Sprintf("inside chunk %d: %d of %d data bytes", d.cur.Index, d.cur.Size-d.remain, d.cur.Size)}
	case stDataCR, stDataLF:
		return &Error{Offset: d.off, Kind: KindTruncated, Err: io.ErrUnexpectedEOF,
			Detail: fmt.Sprintf("after chunk %d data, before its CRLF", d.cur.Index)}
	case stTrailer:
		return &Error{Offset: d.off, Kind: KindTruncated, Err: io.ErrUnexpectedEOF,
			Detail: "inside the trailer section after the last-chunk"}
	case stResync:
		return &Error{Offset: d.off, Kind: KindTruncated, Err: io.ErrUnexpectedEOF,
			Detail: "while looking for a chunk-size line after lost bytes"}
	}
	if n := len(d.line); n > 0 {
		// A CR as the last byte may have been the start of the CRLF:
		// the line is cut short, not invalid (a CR followed by another
		// byte was reported by Write).
		cr := ""
		if d.line[n-1] == '\r' {
			cr = "; the last is a CR, its LF did not come"
		}
		return &Error{Offset: d.off, Kind: KindTruncated, Err: io.ErrUnexpectedEOF,
			Detail: fmt.Sprintf("inside a chunk-size line (%d bytes read%s)", n, cr)}
	}
	return &Error{Offset: d.off, Kind: KindTruncated, Err: io.ErrUnexpectedEOF,
		Detail: fmt.Sprintf("after %s, at a chunk boundary", chunksText(d.index))}
}

// Skip tells the decoder that n body bytes are missing (for example a TCP
// segment that was not captured). When the missing bytes lie inside the
// current chunk's data, framing is kept: Skip returns true and the next byte
// written is taken as the byte after the gap. Otherwise framing is lost:
// Skip returns false and the decoder resynchronises (see Resyncing).
// The chunk that the gap interrupted gets no ChunkEnd.
//
// Once the body is complete, missing bytes are not body bytes: Skip does
// nothing and returns true. After an error Skip does nothing and returns
// false; the decoder keeps returning its error.
func (d *Decoder) Skip(n int64) bool {
	switch {
	case d.st == stFailed:
		return false
	case n <= 0 || d.st == stDone:
		return true
	case d.st == stData && n <= d.remain:
		d.remain -= n
		d.off += n
		if d.remain == 0 {
			d.st = stDataCR
		}
		return true
	}
	d.off += n
	d.st = stResync
	d.resyncFresh = true
	d.line = d.line[:0]
	return false
}

// Resync makes a decoder that has read nothing look for the next chunk-size
// line, as after lost bytes: for a body whose start was not captured (a
// capture that begins in the middle of a watch). The rules of Skip's
// resynchronisation apply.
func (d *Decoder) Resync() {
	d.st = stResync
	d.resyncFresh = true
	d.line = d.line[:0]
}

// Discarded returns how many body bytes the decoder passed over, in all,
// while looking for a chunk-size line after lost bytes (see Skip): data of
// chunks whose size line was lost.
func (d *Decoder) Discarded() int64 { return d.discarded }

// Resyncing reports whether the decoder is looking for a chunk-size line
// after framing was lost (see Skip).
func (d *Decoder) Resyncing() bool { return d.st == stResync }

// resyncWindow is how many bytes of context resync keeps: enough for
// CRLF, eight hex digits and CRLF.
const resyncWindow = 12

// resync scans p for the end of one chunk and the start of the next:
// CRLF, 1 to 8 hex digits, CRLF. Eight digits (up to 4 GiB) keep false
// matches inside data rare. Bytes before the match are dropped, as they
// belong to a chunk whose start was lost. It returns the bytes consumed;
// on a match the decoder continues in chunk data of the found chunk.
func (d *Decoder) resync(p []byte) int {
	for i, b := range p {
		if len(d.line) == resyncWindow {
			d.resyncFresh = false
			copy(d.line, d.line[1:])
			d.line = d.line[:resyncWindow-1]
		}
		d.line = append(d.line, b)
		d.off++
		d.discarded++
		if b != '\n' {
			continue
		}
		w := d.line
		// w ends with LF; look for "\r\n" HEX+ "\r\n" at its end.
		if len(w) < 3 || w[len(w)-2] != '\r' {
			continue
		}
		j := len(w) - 3
		for j >= 0 {
			if _, ok := isHex(w[j]); !ok {
				break
			}
			j--
		}
		digits := len(w) - 3 - j
		// A size line right at the first byte after the gap (the lost
		// bytes ended exactly at a chunk boundary) has no CRLF before it.
		atStart := d.resyncFresh && j == -1
		if digits < 1 || digits > 8 || (!atStart && (j < 1 || w[j] != '\n' || w[j-1] != '\r')) {
			continue
		}
		hdr := w[j+1:]
		d.discarded -= int64(len(hdr))
		d.resyncFresh = false
		d.lineOff = d.off - int64(len(hdr))
		d.line = append(d.line[:0], hdr...)
		if err := d.sizeLine(d.line, d.line[:len(d.line)-2]); err != nil {
			d.st = stResync
			d.line = d.line[:0]
			continue
		}
		d.line = d.line[:0]
		return i + 1
	}
	return len(p)
}
