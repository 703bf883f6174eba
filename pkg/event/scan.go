package event

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Byte-parallel search within a 64-bit word ("SWAR"): x has a zero byte
// where (x - lsb) &^ x has its high bit set, and the lowest such bit marks
// the first zero byte exactly (borrows only run upwards from a zero byte).
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// indexSpecial returns the index of the first '"' or '\' in p (and, with
// nl, of the first '\n'), or -1. Strings dense with escapes (configuration
// files inside ConfigMaps, JSON inside annotations) have one within a few
// bytes: the first 32 bytes are searched eight at a time without a
// function call. Beyond that, bytes.IndexByte (vectorised) searches
// windows that double from 256 bytes to 64 KiB, so that long plain strings
// run at its speed and no search runs far past the first special byte.
func indexSpecial(p []byte, nl bool) int {
	i := 0
	for ; i+8 <= len(p) && i < 32; i += 8 {
		w := binary.LittleEndian.Uint64(p[i:])
		q := w ^ (lsb * '"')
		b := w ^ (lsb * '\\')
		m := (q-lsb)&^q | (b-lsb)&^b
		if nl {
			n := w ^ (lsb * '\n')
			m |= (n - lsb) &^ n
		}
		if m &= msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	if len(p) < 40 {
		for ; i < len(p); i++ {
			if c := p[i]; c == '"' || c == '\\' || (nl && c == '\n') {
				return i
			}
		}
		return -1
	}
	for w := 256; i < len(p); w = min(2*w, 64<<10) {
		win := p[i:min(i+w, len(p))]
		first := -1
		for _, c := range [...]byte{'"', '\\', '\n'} {
			if c == '\n' && !nl {
				break
			}
			if first >= 0 {
				win = win[:first] // only an earlier one matters
			}
			if k := bytes.IndexByte(win, c); k >= 0 {
				first = k
			}
		}
		if first >= 0 {
			return i + first
		}
		i += len(win)
	}
	return -1
}

// zeroBytes returns x with the high bit set in each byte that is zero and
// every other bit clear. Unlike (x - lsb) &^ x it is exact in every byte
// (no borrow crosses a byte: the low seven bits of each byte plus 0x7f
// stay below 0x100), so all the bytes it marks can be used, not only the
// lowest.
func zeroBytes(x uint64) uint64 {
	const low7 = 0x7f7f7f7f7f7f7f7f
	return ^((x&low7 + low7) | x | low7)
}

// scanString scans the contents of a JSON string from p[i] (just after its
// opening quote, or inside it) to its closing quote, stepping over escapes
// (RFC 8259 §7: a backslash and the byte after it). It returns the index of
// the closing quote, or with nl of the first newline (raw, or escaped: no
// JSON string holds either, so the event may have been cut), or len(p)
// when p ends first; esc reports that p ends just after a backslash, whose
// escaped byte is still to come.
//
// Strings dense with escapes (configuration files inside ConfigMaps, JSON
// inside annotations) have one every few bytes: each 8-byte word is
// searched for all three bytes at once, and every escape within the word
// is stepped over without searching again. After four words with none,
// indexSpecial's vectorised search takes over for the rest of a long plain
// run.
func scanString(p []byte, i int, nl bool) (j int, esc bool) {
	plain := 0
	for i+8 <= len(p) {
		w := binary.LittleEndian.Uint64(p[i:])
		m := zeroBytes(w^(lsb*'"')) | zeroBytes(w^(lsb*'\\'))
		if nl {
			m |= zeroBytes(w ^ (lsb * '\n'))
		}
		if m == 0 {
			i += 8
			if plain++; plain == 4 {
				plain = 0
				k := indexSpecial(p[i:], nl)
				if k < 0 {
					return len(p), false
				}
				i += k
			}
			continue
		}
		plain = 0
		next := i + 8
		for m != 0 {
			k := i + bits.TrailingZeros64(m)/8
			if p[k] != '\\' {
				return k, false
			}
			if k+1 == len(p) {
				return len(p), true
			}
			if nl && p[k+1] == '\n' {
				return k + 1, false
			}
			if k+2 >= i+8 { // the escaped byte ends the word or is past it
				next = k + 2
				break
			}
			m &^= 1<<(8*uint(k+2-i)) - 1 // bytes up to the escaped one
		}
		i = next
	}
	for i < len(p) {
		switch p[i] {
		case '"':
			return i, false
		case '\n':
			if nl {
				return i, false
			}
		case '\\':
			if i+1 == len(p) {
				return len(p), true
			}
			if nl && p[i+1] == '\n' {
				return i + 1, false
			}
			i++
		}
		i++
	}
	return len(p), false
}
