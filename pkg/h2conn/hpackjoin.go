package h2conn

import (
	"fmt"

	"golang.org/x/net/http2/hpack"

	"github.com/kwatch/kwatch/pkg/record"
)

// A direction joined mid-connection decodes its header blocks with a
// joinedHPACK instead of x/net's hpack.Decoder: that Decoder stops at the
// first index its dynamic table does not hold (InvalidIndexError), and its
// table can be neither seeded nor inspected, so it cannot say which
// fields of a block are unknown and go on with the rest. joinedHPACK
// parses the representations of RFC 7541 §6 one by one (Huffman strings
// through x/net's HuffmanDecodeToString, the static table as x/net's
// Decoder reads it).
//
// What the dynamic table held at the join is unknown, and so is how many
// entries it held. Entries added since the join by literals with
// incremental indexing (§6.2.1) are known, and they are the newest: the
// table is a FIFO (§2.3.2), so the k-th newest entry since the join is at
// index 62+k while it is still in the table, whatever came before it. A
// reference to an index within 62 .. 61+(entries added since the join) is
// known; one past it refers to an entry from before the join, and is said
// to be unknown, never guessed.
//
// Keeping an entry the peer's encoder has evicted costs nothing but
// memory: a valid encoder never refers to an index past its table, and an
// entry is evicted only after every older one, so the indexes below an
// evicted entry still name the same entries. Entries are therefore evicted
// here by a bound at least the encoder's: the last dynamic table size
// update since the join (§6.3), or else maxHeaderTableBytes, counting an
// entry whose name is unknown as its value and 32 bytes (§4.1).

// staticTable is HPACK's static table (RFC 7541 Appendix A), index 1 to
// 61, as x/net's Decoder reads it.
var staticTable = func() (t [61]hpack.HeaderField) {
	for i := range t {
		fs, err := hpack.NewDecoder(0, nil).DecodeFull([]byte{0x80 | byte(i+1)})
		if err != nil || len(fs) != 1 {
			panic(fmt.Sprintf("hpack static table entry %d: %v", i+1, err))
		}
		t[i] = fs[0]
	}
	return t
}()

// joinedEntry is a dynamic table entry added since the join: its value is
// a literal, so known; its name is unknown when it came by an index to an
// entry from before the join.
type joinedEntry struct {
	name, value string
	nameKnown   bool
}

func (e joinedEntry) size() int64 { return int64(len(e.name)+len(e.value)) + 32 }

// joinedHPACK is the HPACK decoding state of one direction joined
// mid-connection.
type joinedHPACK struct {
	// table holds the entries added since the join, oldest first.
	table []joinedEntry
	size  int64 // their sizes (an unknown name counts 0 bytes)
	max   int64 // the bound they are evicted by
	// maxString bounds one string literal, in bytes.
	maxString int
}

func newJoinedHPACK(maxString int) *joinedHPACK {
	return &joinedHPACK{max: maxHeaderTableBytes, maxString: maxString}
}

// errHPACK is a header block that does not decode.
type errHPACK struct{ what string }

func (e errHPACK) Error() string { return e.what }

var errTruncated = errHPACK{"header block ends inside a field representation"}

// decode decodes one whole header block: each field whose name and value
// are known goes to field, each that refers to an entry from before the
// join to unknown. After an error the fields of the rest of the block are
// lost, and so are the entries they may have added: the entries since the
// join are forgotten (every index past the static table is unknown from
// then on).
func (d *joinedHPACK) decode(p []byte, field func(hpack.HeaderField), unknown func(record.UnknownField)) error {
	err := d.decodeBlock(p, field, unknown)
	if err != nil {
		d.forget()
	}
	return err
}

// forget drops the entries added since the join: after a block that was
// not decoded whole, what the table holds is unknown again.
func (d *joinedHPACK) forget() { d.table, d.size = nil, 0 }

func (d *joinedHPACK) decodeBlock(p []byte, field func(hpack.HeaderField), unknown func(record.UnknownField)) error {
	for pos := 0; len(p) > 0; {
		b := p[0]
		var err error
		switch {
		case b&0x80 != 0: // indexed field (§6.1)
			var i uint64
			if i, p, err = readInt(7, p); err != nil {
				return err
			}
			if i == 0 {
				return errHPACK{"indexed field with index 0 (RFC 7541 §6.1)"}
			}
			e, known, ok := d.at(i)
			switch {
			case !ok:
				unknown(record.UnknownField{Position: pos, Index: i, ValueBytes: -1})
			case !known:
				unknown(record.UnknownField{Position: pos, Index: i, ValueBytes: len(e.Value)})
			default:
				field(e)
			}
			pos++
		case b&0xe0 == 0x20: // dynamic table size update (§6.3)
			var v uint64
			if v, p, err = readInt(5, p); err != nil {
				return err
			}
			d.max = min(int64(v), maxHeaderTableBytes)
			d.evict()
		default: // a literal (§6.2.1: 01, §6.2.2: 0000, §6.2.3: 0001)
			n, indexing, never := uint8(4), false, b&0xf0 == 0x10
			if b&0xc0 == 0x40 {
				n, indexing = 6, true
			}
			var ni uint64
			if ni, p, err = readInt(n, p); err != nil {
				return err
			}
			var e joinedEntry
			if ni == 0 {
				if e.name, p, err = d.readString(p); err != nil {
					return err
				}
				e.nameKnown = true
			} else {
				f, known, ok := d.at(ni)
				e.name, e.nameKnown = f.Name, ok && known
			}
			if e.value, p, err = d.readString(p); err != nil {
				return err
			}
			if e.nameKnown {
				field(hpack.HeaderField{Name: e.name, Value: e.value, Sensitive: never})
			} else {
				unknown(record.UnknownField{Position: pos, Index: ni, ValueBytes: len(e.value)})
			}
			if indexing {
				d.add(e)
			}
			pos++
		}
	}
	return nil
}

// at returns the field at index i (RFC 7541 §2.3.3): ok is false for an
// entry from before the join; known is false for an entry added since
// the join whose name is not known (its Value is).
func (d *joinedHPACK) at(i uint64) (f hpack.HeaderField, known, ok bool) {
	if i >= 1 && i <= uint64(len(staticTable)) {
		return staticTable[i-1], true, true
	}
	k := i - uint64(len(staticTable)) - 1 // 0: the newest entry
	if k >= uint64(len(d.table)) {
		return hpack.HeaderField{}, false, false
	}
	e := d.table[len(d.table)-1-int(k)]
	return hpack.HeaderField{Name: e.name, Value: e.value}, e.nameKnown, true
}

// add adds an entry (§4.4): an entry larger than the bound empties the
// table.
func (d *joinedHPACK) add(e joinedEntry) {
	if e.size() > d.max {
		d.table, d.size = d.table[:0], 0
		return
	}
	d.table = append(d.table, e)
	d.size += e.size()
	d.evict()
}

// evict drops the oldest entries until they fit in the bound (§4.4).
func (d *joinedHPACK) evict() {
	n := 0
	for d.size > d.max && n < len(d.table) {
		d.size -= d.table[n].size()
		n++
	}
	if n > 0 {
		d.table = append(d.table[:0], d.table[n:]...)
	}
}

// readInt reads an integer of an n-bit prefix (RFC 7541 §5.1), at most
// 2^32-1 (no index, length or table size is larger).
func readInt(n uint8, p []byte) (uint64, []byte, error) {
	if len(p) == 0 {
		return 0, p, errTruncated
	}
	mask := uint64(1)<<n - 1
	v := uint64(p[0]) & mask
	p = p[1:]
	if v < mask {
		return v, p, nil
	}
	for shift := uint(0); ; shift += 7 {
		if len(p) == 0 {
			return 0, p, errTruncated
		}
		b := p[0]
		p = p[1:]
		v += uint64(b&0x7f) << shift
		if v > 1<<32-1 {
			return 0, p, errHPACK{"integer larger than 2^32-1 (RFC 7541 §5.1)"}
		}
		if b&0x80 == 0 {
			return v, p, nil
		}
	}
}

// readString reads a string literal (RFC 7541 §5.2), Huffman-coded or
// not, of at most maxString bytes on the wire.
func (d *joinedHPACK) readString(p []byte) (string, []byte, error) {
	if len(p) == 0 {
		return "", p, errTruncated
	}
	huff := p[0]&0x80 != 0
	n, p, err := readInt(7, p)
	if err != nil {
		return "", p, err
	}
	if n > uint64(d.maxString) {
		return "", p, errHPACK{fmt.Sprintf("string literal of %d bytes, more than %d", n, d.maxString)}
	}
	if uint64(len(p)) < n {
		return "", p, errTruncated
	}
	raw := p[:n]
	p = p[n:]
	if !huff {
		return string(raw), p, nil
	}
	s, err := hpack.HuffmanDecodeToString(raw)
	if err != nil {
		return "", p, errHPACK{"bad Huffman code (RFC 7541 §5.2): " + err.Error()}
	}
	return s, p, nil
}
