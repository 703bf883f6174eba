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

// hasControl reports whether p holds a byte below 0x20, eight bytes at a
// time (a byte of x is below n where (x - n*lsb) &^ x has its high bit set,
// for n up to 0x80). JSON allows such bytes only as whitespace between
// tokens (tab, newline, carriage return), and kube-apiserver writes none.
func hasControl(p []byte) bool {
	i := 0
	for ; i+8 <= len(p); i += 8 {
		w := binary.LittleEndian.Uint64(p[i:])
		if (w-lsb*0x20)&^w&msb != 0 {
			return true
		}
	}
	for ; i < len(p); i++ {
		if p[i] < 0x20 {
			return true
		}
	}
	return false
}
