// Package inflate undoes the gzip and deflate content codings of an HTTP
// body (RFC 9110 §8.4.1.2-3; gzip is RFC 1952, deflate the zlib format of
// RFC 1950) push-style, as the compressed bytes arrive: each Write hands on
// everything its bytes let the decompressor produce before it returns, and
// tags it with the carrier (a chunk, a DATA frame) whose bytes produced it.
//
// The decompression itself is the standard library's (compress/gzip,
// compress/zlib, compress/flate); what is kwatch's is following a body
// member by member as it is captured: a gzip body is a series of members (the
// API server flushes one complete member per watch flush), each checked
// (CRC-32 and length) and reported, a damaged member is reported with its
// offset and decoding goes on at the next member, and a member that inflates
// past a bound (a gzip bomb) is cut off.
//
// The standard library's readers pull their input, so an Inflater runs the
// reader on a goroutine of its own and hands it each Write's bytes; Write
// waits until the reader asks for more, so output is produced and handed on
// in the caller's order, deterministically.
package inflate

import (
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Handler receives what an Inflater finds, on the Inflater's goroutine but
// always while the Write or Close that caused it waits: a Handler needs no
// locking against the caller.
type Handler interface {
	// Inflated receives inflated bytes and the carriers of the compressed
	// bytes the decompressor read to produce them (since the previous
	// Inflated call), in order, with how many bytes of each: deflate
	// hands output on a block (or 32 KiB window) at a time, so no finer
	// mapping exists. p and from are valid until Inflated returns.
	Inflated(p []byte, from []Span)
	// Member reports a complete, checked gzip member (or the one zlib
	// stream of deflate): its number from 1, where it started in the
	// compressed bytes (offset in bytes), its compressed and inflated
	// sizes in bytes.
	Member(m Member)
	// Problem reports damaged or hostile input (see the Kind constants);
	// offset is in the compressed bytes. Decoding goes on at the next
	// member that can be found, or stops for deflate.
	Problem(kind, detail string, offset int64)
}

// Span is a run of compressed bytes from one carrier.
type Span struct {
	// Carrier is the tag Write was given with the bytes.
	Carrier int
	// Bytes is how many compressed bytes of it were read.
	Bytes int64
}

// Member describes one gzip member (RFC 1952 §2.2) or the zlib stream of a
// deflate body.
type Member struct {
	// N numbers the members of a body from 1.
	N int
	// Offset is where the member starts in the compressed bytes.
	Offset int64
	// In and Out are its compressed and inflated sizes in bytes.
	In, Out int64
}

// Problem kinds.
const (
	// KindCorrupt: the compressed bytes are not valid (a bad header,
	// invalid deflate data, a CRC-32 or length that does not match).
	KindCorrupt = "content coding corrupt"
	// KindCut: the body ended inside a member.
	KindCut = "compressed member cut short"
	// KindBomb: a member inflated past the bound; the rest of it is
	// skipped.
	KindBomb = "compressed member inflates past the limit"
	// KindJunk: bytes between members that do not start one.
	KindJunk = "bytes between compressed members"
	// KindGap: bytes lost (Gap) inside a member: the rest of it cannot
	// be inflated.
	KindGap = "compressed member broken by lost bytes"
)

// DefaultMaxMemberBytes bounds what one member may inflate to: 256 MiB,
// far above a watch flush (the API server flushes each event, or a burst
// of them), far below what a few MiB of zeros inflate to.
const DefaultMaxMemberBytes = 256 << 20

// Supported reports whether coding (a Content-Encoding value, RFC 9110
// §8.4) is one Inflater undoes: gzip, x-gzip, deflate.
func Supported(coding string) bool {
	switch strings.ToLower(strings.TrimSpace(coding)) {
	case "gzip", "x-gzip", "deflate":
		return true
	}
	return false
}

// Inflater follows one compressed body. Create it with New; call Write for
// each piece of the body in order, then Close once.
type Inflater struct {
	r      *input
	in     chan piece
	idle   chan struct{}
	done   chan struct{}
	closed bool
}

type piece struct {
	p       []byte
	carrier int
	eof     bool
	gap     int64 // bytes lost (Gap)
}

// errEnd is what the input returns once the body has ended.
var errEnd = io.ErrUnexpectedEOF

// errGap is what the input returns once after bytes were lost.
var errGap = errors.New("compressed bytes lost")

// New starts an Inflater for coding (Supported must be true) that reports
// to h. maxMember bounds the inflated bytes of one member
// (DefaultMaxMemberBytes when 0 or less).
func New(coding string, h Handler, maxMember int64) *Inflater {
	if maxMember <= 0 {
		maxMember = DefaultMaxMemberBytes
	}
	z := &Inflater{in: make(chan piece), idle: make(chan struct{}), done: make(chan struct{})}
	r := &input{z: z}
	z.r = r
	gz := strings.ToLower(strings.TrimSpace(coding)) != "deflate"
	go func() {
		defer close(z.done)
		w := &worker{r: r, h: h, max: maxMember, buf: make([]byte, 32<<10)}
		if gz {
			w.gzip()
		} else {
			w.deflate()
		}
		// Whatever comes after the end is read and dropped, so that
		// Write never waits on a reader that has stopped.
		r.skipAll()
	}()
	return z
}

// Write hands on p, compressed bytes carried by carrier, and returns once
// everything they let the decompressor produce has been passed to the
// Handler.
func (z *Inflater) Write(p []byte, carrier int) {
	if z.closed || len(p) == 0 {
		return
	}
	z.in <- piece{p: p, carrier: carrier}
	<-z.idle
}

// Oldest returns the carrier of the first compressed byte read but not yet
// handed on inflated (false when there is none): a caller that keeps
// carriers in a window must keep that one and those after it. Call it only
// between Write calls.
func (z *Inflater) Oldest() (int, bool) {
	if len(z.r.read) == 0 {
		return 0, false
	}
	return z.r.read[0].Carrier, true
}

// Gap tells the Inflater that n compressed bytes were lost (not captured):
// a member in progress cannot be inflated further and is dropped silently
// (the caller reports the loss); decoding goes on at the next member.
func (z *Inflater) Gap(n int64) {
	if z.closed || n <= 0 {
		return
	}
	z.in <- piece{gap: n}
	<-z.idle
}

// Close ends the input: a member in progress is reported cut short. It
// returns once the Inflater's goroutine has ended.
func (z *Inflater) Close() {
	if z.closed {
		return
	}
	z.closed = true
	z.in <- piece{eof: true}
	<-z.done
}

// input is the reader the decompressors pull from: it implements
// io.ByteReader, so that neither gzip nor flate reads ahead of what they
// need (they would wrap it in a bufio.Reader otherwise), and the offset of
// every byte is known.
type input struct {
	z *Inflater
	// piece is the Write being read, pos how many of its bytes are read,
	// noted how many of those are listed in read (see note): ReadByte,
	// called once per compressed byte, only moves pos.
	piece      []byte
	pos, noted int
	carrier    int
	// base is the offset of piece in the compressed bytes: the bytes
	// before it, read or lost.
	base    int64
	eof     bool
	started bool
	// read lists the carriers of the bytes read since the last output,
	// up to noted.
	read []Span
	// gapped: peek passed over lost bytes (the bytes after them, up to
	// the next member, belong to a member whose start was lost).
	gapped bool
}

// off is the offset of the next byte to read in the compressed bytes.
func (r *input) off() int64 { return r.base + int64(r.pos) }

// note lists in read the bytes of the current piece read since the last
// note, as bytes of its carrier.
func (r *input) note() {
	n := int64(r.pos - r.noted)
	if n == 0 {
		return
	}
	r.noted = r.pos
	if k := len(r.read); k > 0 && r.read[k-1].Carrier == r.carrier {
		r.read[k-1].Bytes += n
		return
	}
	r.read = append(r.read, Span{Carrier: r.carrier, Bytes: n})
}

// dropRead forgets the bytes read so far: they produce no output.
func (r *input) dropRead() {
	r.noted = r.pos
	r.read = r.read[:0]
}

// fill waits for the next piece: nil when there are bytes to read, errEnd
// once the body has ended, errGap (once) when bytes were lost.
func (r *input) fill() error {
	for r.pos == len(r.piece) {
		if r.eof {
			return errEnd
		}
		if r.started {
			r.note()               // before the piece goes back to its writer
			r.z.idle <- struct{}{} // all of the last piece is used up
		}
		r.started = true
		pc := <-r.z.in
		r.base += int64(len(r.piece))
		r.piece, r.pos, r.noted = nil, 0, 0
		switch {
		case pc.eof:
			r.eof = true
			return errEnd
		case pc.gap > 0:
			r.base += pc.gap
			return errGap
		}
		r.piece, r.carrier = pc.p, pc.carrier
	}
	return nil
}

func (r *input) ReadByte() (byte, error) {
	if r.pos == len(r.piece) {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	c := r.piece[r.pos]
	r.pos++
	return c, nil
}

func (r *input) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.piece[r.pos:])
	r.pos += n
	return n, nil
}

// peek returns the next byte without reading it; false once the body has
// ended. Lost bytes are passed over.
func (r *input) peek() (byte, bool) {
	for {
		switch err := r.fill(); err {
		case nil:
			return r.piece[r.pos], true
		case errGap:
			r.gapped = true
			continue
		default:
			return 0, false
		}
	}
}

// skipAll reads and drops everything until the body ends.
func (r *input) skipAll() {
	for r.fill() != errEnd {
		r.pos, r.noted = len(r.piece), len(r.piece) // skipped, not listed
	}
	if r.started && !r.eof {
		r.z.idle <- struct{}{}
	}
}

// worker runs on the Inflater's goroutine.
type worker struct {
	r   *input
	h   Handler
	max int64
	buf []byte
	n   int // members started
	// resync: looking for the next member after a damaged one; what is
	// skipped meanwhile was reported with the damage.
	resync bool
}

// out hands inflated bytes on with the carriers read to produce them.
func (w *worker) out(p []byte) {
	w.r.note()
	w.h.Inflated(p, w.r.read)
	w.r.read = w.r.read[:0]
}

// gzip follows a series of gzip members (RFC 1952 §2.2).
func (w *worker) gzip() {
	var zr gzip.Reader
	for {
		start, ok := w.nextMember()
		if !ok {
			return
		}
		if err := zr.Reset(w.r); err != nil {
			if w.resync || errors.Is(err, errGap) {
				w.resync = true
				continue // a 0x1f inside a damaged member's rest, or lost bytes
			}
			w.n++
			if errors.Is(err, errEnd) {
				w.h.Problem(KindCut, fmt.Sprintf("gzip member %d: the body ended inside its header", w.n), start)
				return
			}
			w.h.Problem(KindCorrupt, fmt.Sprintf("gzip member %d: %v; looking for the next member", w.n, describe(err)), start)
			w.resync = true
			continue
		}
		w.n++
		w.resync = false
		zr.Multistream(false)
		if !w.inflate(&zr, "gzip member", start) {
			return
		}
	}
}

// nextMember skips to the next byte that may start a gzip member (0x1f)
// and returns its offset; bytes skipped are reported. false when the body
// has ended.
func (w *worker) nextMember() (int64, bool) {
	from := w.r.off()
	for {
		c, ok := w.r.peek()
		if w.r.gapped {
			// Lost bytes (reported by the caller as missing): what
			// follows them up to the next member is the rest of one
			// whose start was lost, not junk.
			w.r.gapped, w.resync = false, true
		}
		if !ok {
			if w.r.off() > from && !w.resync {
				w.h.Problem(KindJunk, fmt.Sprintf("%d bytes that do not start a gzip member, then the body ended", w.r.off()-from), from)
			}
			return 0, false
		}
		if c == 0x1f {
			if w.r.off() > from && !w.resync {
				w.h.Problem(KindJunk, fmt.Sprintf("%d bytes that do not start a gzip member", w.r.off()-from), from)
			}
			// The last member's trailer, and bytes between members,
			// produce no output of this one.
			w.r.dropRead()
			return w.r.off(), true
		}
		_, _ = w.r.ReadByte()
	}
}

// deflate follows the one zlib stream of a deflate body (RFC 9110 §8.4.1.2),
// or a raw deflate stream, which some servers send instead (RFC 1951).
func (w *worker) deflate() {
	w.n = 1
	c, ok := w.r.peek()
	if !ok {
		return
	}
	var rc io.ReadCloser
	if c&0x0f == 8 { // CM = 8 in a zlib header (RFC 1950 §2.2)
		zr, err := zlib.NewReader(w.r)
		if err != nil {
			w.h.Problem(KindCorrupt, fmt.Sprintf("deflate: %v", err), 0)
			return
		}
		rc = zr
	} else {
		rc = flate.NewReader(w.r)
	}
	if w.inflate(rc, "deflate stream", 0) && !w.resync && w.r.fill() == nil {
		w.h.Problem(KindJunk, "bytes after the end of the deflate stream", w.r.off())
	}
}

// inflate reads one member to its end; false when the body ended inside it.
func (w *worker) inflate(rd io.Reader, what string, start int64) bool {
	var out int64
	for {
		n, err := rd.Read(w.buf)
		if n > 0 {
			if out+int64(n) > w.max {
				n = int(w.max - out)
				w.out(w.buf[:n])
				w.h.Problem(KindBomb, fmt.Sprintf("%s %d inflates past %d bytes (from %d compressed bytes so far); the rest of it is skipped",
					what, w.n, w.max, w.r.off()-start), start)
				w.resync = true
				return true
			}
			out += int64(n)
			w.out(w.buf[:n])
		}
		switch {
		case err == nil:
			continue
		case err == io.EOF:
			w.h.Member(Member{N: w.n, Offset: start, In: w.r.off() - start, Out: out})
			return true
		case errors.Is(err, errGap):
			w.h.Problem(KindGap, fmt.Sprintf("%s %d (from offset %d) cannot be inflated past the lost bytes: what it carried after its first %d inflated bytes is lost",
				what, w.n, start, out), start)
			w.resync = true
			return true
		case errors.Is(err, errEnd):
			w.h.Problem(KindCut, fmt.Sprintf("%s %d: the body ended after %d compressed bytes of it (%d inflated)", what, w.n, w.r.off()-start, out), start)
			return false
		default:
			next := "; looking for the next member"
			if what != "gzip member" {
				next = "; the rest of the body is not decoded"
			}
			w.h.Problem(KindCorrupt, fmt.Sprintf("%s %d: %v after %d compressed bytes (%d inflated)%s",
				what, w.n, describe(err), w.r.off()-start, out, next), w.r.off())
			w.resync = true
			return true
		}
	}
}

// describe names a decompressor's error in the field's terms.
func describe(err error) string {
	var ce flate.CorruptInputError
	switch {
	case errors.As(err, &ce):
		return "invalid deflate data"
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, zlib.ErrChecksum):
		return "checksum mismatch (CRC-32 or length)"
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, zlib.ErrHeader):
		return "invalid header"
	}
	return err.Error()
}

// input is a flate.Reader, so that gzip and flate read it byte by byte
// rather than through a bufio.Reader that would read ahead.
var _ flate.Reader = (*input)(nil)
