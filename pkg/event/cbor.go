package event

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// CBOR watches ("application/cbor-seq", RFC 8742 CBOR Sequences): the API
// server writes each watch event as one self-described CBOR data item
// (RFC 8949 §3.4.6, tag 55799), with no length prefix and no separator.
// apimachinery's cbor framer finds the end of an item by decoding it with
// fxamacker/cbor's stream Decoder, which pulls from an io.Reader and cannot
// say which chunk carried which byte, nor go on after lost bytes; the
// Framer here walks the item's heads (RFC 8949 §3) as bytes arrive, keeps
// the offsets and chunks, and leaves decoding to apimachinery.

// cborEventStarts are how kube-apiserver starts every CBOR watch event: the
// self-described CBOR tag (d9 d9 f7), a map of two pairs (a2), and its first
// key as a byte string: "type" (44 't' 'y' 'p' 'e') for most events, but
// "object" (46 'o' 'b' 'j' 'e' 'c' 't') first for the watch cache's
// bookmarks (seen from kube-apiserver v1.37.2). After lost bytes the Framer
// looks for one of them to regain the framing.
var cborEventStarts = [][]byte{
	{0xd9, 0xd9, 0xf7, 0xa2, 0x44, 't', 'y', 'p', 'e'},
	{0xd9, 0xd9, 0xf7, 0xa2, 0x46, 'o', 'b', 'j', 'e', 'c', 't'},
}

// cborStartMatch reports whether b is a prefix of an event start (partial)
// and whether it is a whole one (full).
func cborStartMatch(b []pendByte) (partial, full bool) {
	for _, pat := range cborEventStarts {
		if len(b) > len(pat) {
			continue
		}
		ok := true
		for i, pb := range b {
			if pb.b != pat[i] {
				ok = false
				break
			}
		}
		if ok {
			return true, len(b) == len(pat)
		}
	}
	return false, false
}

// maxCBORDepth bounds how deeply the containers of one CBOR data item may
// nest (arrays, maps, indefinite-length strings), to keep the Framer's
// bookkeeping small on hostile input. apimachinery's decoder allows 10000
// levels; no Kubernetes object comes near 1024.
const maxCBORDepth = 1024

// MaxCBORItems bounds the CBOR data items of one watch event (every
// integer, string, array, map, tag and simple value counts). Decoding
// turns each into a Go value several times its wire size (an empty map of
// 1 byte becomes a Go map), so a 64 MiB event of empty maps would take
// gigabytes: an event with more items is skipped and reported as larger
// than the limit. Real objects have about one item per 10 bytes or more;
// 1 Mi items is a 10 MiB object of such items, past what etcd stores.
const MaxCBORItems = 1 << 20

// errCBORTooLong is a head announcing a string or container longer than the
// event bound: the event is oversize, and where it ends is not worth waiting
// for (a hostile head may announce 2^64 bytes).
type errCBORTooLong struct{ what string }

func (e errCBORTooLong) Error() string { return e.what }

// cborOpen is one container of the data item in progress.
type cborOpen struct {
	// left counts the data items still due (a map of n pairs is 2n
	// items); -1 for an indefinite-length container, ended by a break.
	left int64
	// strMajor is 2 or 3 for an indefinite-length byte or text string,
	// whose items must be definite strings of that major type; 0 otherwise.
	strMajor byte
}

// cborScan walks the heads of one CBOR data item (RFC 8949 §3) fed in any
// split, to find the byte that completes it.
type cborScan struct {
	items int64 // heads read: data items, tags and breaks
	head  [9]byte
	nhead int    // bytes of the head in progress
	need  int    // length of the head in progress (1 + argument bytes)
	skip  uint64 // bytes of a definite-length string still to pass over
	open  []cborOpen
}

func (s *cborScan) reset() {
	s.nhead, s.need, s.skip, s.items = 0, 0, 0, 0
	s.open = s.open[:0]
}

// scan advances over p. It returns how many bytes of p belong to the item
// (all of p when it is not complete yet), whether the item is complete, and
// an error for bytes that cannot be CBOR (RFC 8949 §3: reserved additional
// information, a break outside an indefinite-length container, a string
// chunk of the wrong type) or that announce more than max bytes.
//
// With stop, scan also returns early (not done) before a byte 0xd9 that
// starts an item nested in the item in progress (atBoundary), for the
// Framer to check whether a new event starts there; holdFirst says whether
// that applies to p's first byte too.
func (s *cborScan) scan(p []byte, max int64, holdFirst bool) (n int, done bool, err error) {
	for n < len(p) {
		if p[n] == 0xd9 && (n > 0 || holdFirst) && s.atBoundary() {
			return n, false, nil
		}
		if s.skip > 0 {
			k := uint64(len(p) - n)
			if k > s.skip {
				k = s.skip
			}
			n += int(k)
			s.skip -= k
			if s.skip == 0 && s.itemDone() {
				return n, true, nil
			}
			continue
		}
		if s.nhead == 0 {
			switch ai := p[n] & 0x1f; {
			case ai < 24, ai == 31:
				s.need = 1
			case ai <= 27:
				s.need = 1 + 1<<(ai-24)
			default:
				return n, false, fmt.Errorf("initial byte 0x%02x uses reserved additional information %d", p[n], ai)
			}
		}
		k := copy(s.head[s.nhead:s.need], p[n:])
		s.nhead += k
		n += k
		if s.nhead < s.need {
			return n, false, nil
		}
		s.nhead = 0
		complete, err := s.onHead(max)
		if err != nil {
			return n, false, err
		}
		if complete {
			return n, true, nil
		}
	}
	return n, false, nil
}

// onHead handles the head just read; complete is true when it completed
// the top-level item.
func (s *cborScan) onHead(max int64) (complete bool, err error) {
	major, ai := s.head[0]>>5, s.head[0]&0x1f
	if s.items++; s.items > MaxCBORItems {
		return false, errCBORTooLong{fmt.Sprintf("more than %d CBOR data items (each decodes to a Go value many times its size)", MaxCBORItems)}
	}
	if ai == 31 && (major == 0 || major == 1) {
		return false, fmt.Errorf("initial byte 0x%02x is not well-formed (an integer of indefinite length)", s.head[0])
	}
	if major == 7 && ai == 24 && s.head[1] < 32 {
		return false, fmt.Errorf("simple value %d in two bytes is not well-formed (RFC 8949 §3.3)", s.head[1])
	}
	var arg uint64
	switch s.need {
	case 1:
		arg = uint64(ai)
	case 2:
		arg = uint64(s.head[1])
	case 3:
		arg = uint64(binary.BigEndian.Uint16(s.head[1:]))
	case 5:
		arg = uint64(binary.BigEndian.Uint32(s.head[1:]))
	case 9:
		arg = binary.BigEndian.Uint64(s.head[1:])
	}
	if len(s.open) > 0 {
		if top := s.open[len(s.open)-1]; top.strMajor != 0 && s.head[0] != 0xff && (major != top.strMajor || ai == 31) {
			return false, fmt.Errorf("initial byte 0x%02x inside an indefinite-length string of major type %d", s.head[0], top.strMajor)
		}
	}
	switch major {
	case 0, 1: // unsigned and negative integers
		return s.itemDone(), nil
	case 2, 3: // byte and text strings
		if ai == 31 {
			return false, s.push(cborOpen{left: -1, strMajor: major})
		}
		if arg > uint64(max) {
			return false, errCBORTooLong{fmt.Sprintf("a string announces %d bytes, more than %d", arg, max)}
		}
		if arg == 0 {
			return s.itemDone(), nil
		}
		s.skip = arg
		return false, nil
	case 4, 5: // arrays and maps
		if ai == 31 {
			return false, s.push(cborOpen{left: -1})
		}
		items := arg
		if major == 5 {
			items = 2 * arg
		}
		// Every item takes at least one byte.
		if arg > uint64(max) || items > uint64(max) {
			return false, errCBORTooLong{fmt.Sprintf("a %s announces %d entries, more than %d bytes can hold", map[byte]string{4: "array", 5: "map"}[major], arg, max)}
		}
		if items == 0 {
			return s.itemDone(), nil
		}
		return false, s.push(cborOpen{left: int64(items)})
	case 6: // a tag: the next data item completes it
		if ai == 31 {
			return false, fmt.Errorf("initial byte 0x%02x is not well-formed (a tag of indefinite length)", s.head[0])
		}
		return false, nil
	default: // 7: simple values, floats, break
		if ai == 31 {
			if len(s.open) == 0 || s.open[len(s.open)-1].left != -1 {
				return false, fmt.Errorf("a break (0xff) outside an indefinite-length container")
			}
			s.open = s.open[:len(s.open)-1]
			return s.itemDone(), nil
		}
		return s.itemDone(), nil
	}
}

// atBoundary reports whether the next byte starts a data item nested in
// the item in progress (not inside a string, nor the item's first byte).
func (s *cborScan) atBoundary() bool {
	return s.nhead == 0 && s.skip == 0 && len(s.open) > 0 && s.open[len(s.open)-1].strMajor == 0
}

func (s *cborScan) push(o cborOpen) error {
	if len(s.open) >= maxCBORDepth {
		return fmt.Errorf("containers nested deeper than %d levels", maxCBORDepth)
	}
	s.open = append(s.open, o)
	return nil
}

// itemDone counts a completed data item against its container, closing
// every container it completes; it reports whether the top-level item is
// complete.
func (s *cborScan) itemDone() bool {
	for len(s.open) > 0 {
		top := &s.open[len(s.open)-1]
		if top.left < 0 {
			return false
		}
		top.left--
		if top.left > 0 {
			return false
		}
		s.open = s.open[:len(s.open)-1]
	}
	return true
}

// writeCBOR frames p, from chunk c, as CBOR data items.
func (fr *Framer) writeCBOR(p []byte, c int) {
	if fr.resync {
		// A body whose start was not captured, or bytes lost between
		// events: look for the next event's start.
		fr.resync = false
		fr.lost = true
	}
	for len(p) > 0 {
		switch {
		case fr.lost:
			p = p[fr.seekCBOR(p, c):]
		case len(fr.hold) > 0 || (fr.in && !fr.holdOff && fr.cbor.atBoundary() && p[0] == 0xd9):
			p = p[fr.holdCBOR(p, c):]
		case !fr.in && !cborMayStartEvent(p[0]):
			// kube-apiserver starts every event with the self-described
			// tag (or, from another writer, a map): anything else is
			// junk, reported once, up to the next event start.
			fr.onProb(FrameProblem{Offset: fr.off, Kind: KindJunk,
				Detail: fmt.Sprintf("byte 0x%02x does not start a CBOR watch event (a self-described map); looking for the next event", p[0])})
			fr.lost = true
			fr.seekAt = fr.off
		default:
			holdFirst := !fr.holdOff
			fr.holdOff = false
			p = p[fr.scanCBOR(p, c, holdFirst):]
		}
	}
}

// cborMayStartEvent reports whether b may be the first byte of a watch
// event: the self-described tag's head (0xd9) or a map's.
func cborMayStartEvent(b byte) bool {
	return b == 0xd9 || b>>5 == 5
}

// scanCBOR walks p as bytes of the event in progress (starting one) and
// returns how many it took.
func (fr *Framer) scanCBOR(p []byte, c int, holdFirst bool) int {
	if !fr.in {
		fr.start(c)
		fr.cbor.reset()
	}
	n, done, err := fr.cbor.scan(p, fr.max, holdFirst)
	fr.take(p[:n], c)
	var tooLong errCBORTooLong
	switch {
	case errors.As(err, &tooLong):
		if !fr.cur.Oversize {
			fr.oversize(fmt.Sprintf("at offset %d %s; skipped, looking for the next event", fr.off-1, err))
		}
		fr.abandon()
		fr.lost = true
		fr.seekAt = fr.off
	case err != nil:
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindMalformed,
			Detail: fmt.Sprintf("at offset %d: %v; looking for the next event", fr.off-1, err)})
		fr.abandon()
		fr.lost = true
		fr.seekAt = fr.off
	case done:
		fr.finish()
	}
	return n
}

// holdCBOR holds the bytes at an item boundary inside an event that may
// be the start of a new watch event (cborEventStarts), and returns how many
// of p it consumed. A whole start there means the event in progress never
// ended (an indefinite-length container never closed, a container
// announcing more items than came): it is reported cut short and a new
// event starts, as the JSON Framer does at a line starting {"type":. A
// start inside a string is never looked for. Otherwise the held bytes go
// on as the event's.
func (fr *Framer) holdCBOR(p []byte, c int) int {
	for i, b := range p {
		fr.hold = append(fr.hold, pendByte{b, c})
		partial, full := cborStartMatch(fr.hold)
		if partial && !full {
			continue
		}
		held := fr.hold
		fr.hold = nil
		if full {
			fr.cutShort("never ended")
		} else {
			fr.holdOff = true // the first held byte is the event's, not a start
		}
		eachRun(held, fr.writeCBOR)
		return i + 1
	}
	return len(p)
}

// seekCBOR looks in p for one of cborEventStarts after CBOR framing was lost and
// returns how many bytes of p it consumed. Bytes that cannot begin the
// pattern are passed over; the bytes of a partial match are held (fr.pend)
// until it completes or fails. When the pattern completes, the framing is
// regained: a frame starts with the held bytes.
func (fr *Framer) seekCBOR(p []byte, c int) int {
	for i, b := range p {
		fr.pend = append(fr.pend, pendByte{b, c})
		partial, full := cborStartMatch(fr.pend)
		for !partial {
			// The first held byte starts no event: pass it over, and see
			// whether the bytes after it still may (at most 11 bytes are
			// held, so this costs little).
			fr.off++
			fr.pend = append(fr.pend[:0], fr.pend[1:]...)
			if len(fr.pend) == 0 {
				break
			}
			partial, full = cborStartMatch(fr.pend)
		}
		if !full {
			continue
		}
		fr.lost = false
		detail := "a CBOR watch event starts here"
		if skipped := fr.off - fr.seekAt; skipped > 0 {
			detail += fmt.Sprintf("; the %d bytes since offset %d were passed over", skipped, fr.seekAt)
		}
		fr.onProb(FrameProblem{Offset: fr.off, Kind: KindCBORRegained, Warning: true, Detail: detail})
		// Frame the held bytes as the start of an event, run by run of
		// the chunks they came in. (With a tiny --max-event-bytes even
		// they may be too much: the search then starts again after them.)
		pend := append([]pendByte(nil), fr.pend...)
		fr.pend = fr.pend[:0]
		eachRun(pend, fr.writeCBOR)
		return i + 1
	}
	return len(p)
}

// flushHold gives the bytes held at an item boundary back to the event in
// progress: no more come before a gap, a break or the end.
func (fr *Framer) flushHold() {
	if len(fr.hold) > 0 {
		held := fr.hold
		fr.hold = nil
		fr.holdOff = true
		eachRun(held, fr.writeCBOR)
	}
}

// dropPendingCBOR passes over the bytes of a partial match of cborEventStarts.
func (fr *Framer) dropPendingCBOR() {
	fr.off += int64(len(fr.pend))
	fr.pend = fr.pend[:0]
}

// gapCBOR handles n lost bytes of a CBOR body: lost inside a definite-length
// string of the event in progress, the framing holds (the event is damaged);
// anywhere else the Framer looks for the next event's start.
func (fr *Framer) gapCBOR(n int64) {
	fr.flushHold()
	if fr.lost {
		fr.dropPendingCBOR()
		fr.off += n
		return
	}
	if fr.in {
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindLost,
			Detail: fmt.Sprintf("%d bytes missing at offset %d; the event cannot be decoded", n, fr.off)})
		if fr.cbor.skip >= uint64(n) {
			fr.cur.Oversize = true // nothing more is kept
			fr.drop()
			fr.damaged = true
			fr.curLen += n
			fr.off += n
			fr.cbor.skip -= uint64(n)
			if fr.cbor.skip == 0 && fr.cbor.itemDone() {
				fr.in = false
				fr.cur = Frame{}
			}
			return
		}
	}
	fr.abandon()
	fr.off += n
	fr.lost = true
	fr.seekAt = fr.off
	fr.onProb(FrameProblem{Offset: fr.off, Kind: KindLost,
		Detail: "CBOR framing lost; looking for the start of the next watch event"})
}

// breakCBOR handles content that is not continuous (see Break).
func (fr *Framer) breakCBOR(detail string) {
	fr.flushHold()
	if fr.lost {
		fr.dropPendingCBOR()
		return
	}
	if fr.in {
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindLost, Detail: detail})
	}
	fr.abandon()
	fr.lost = true
	fr.seekAt = fr.off
	fr.onProb(FrameProblem{Offset: fr.off, Kind: KindLost,
		Detail: "CBOR framing lost; looking for the start of the next watch event"})
}
