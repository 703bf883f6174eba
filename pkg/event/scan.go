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

// indexSpecial returns the index of the first '"' or '\' in p, or -1.
// Strings dense with escapes (configuration files inside ConfigMaps, JSON
// inside annotations) have one within a few bytes: the first 32 bytes are
// searched eight at a time without a function call. Beyond that,
// bytes.IndexByte (vectorised) searches windows that double from 256
// bytes to 64 KiB, so that long plain strings run at its speed and no
// search runs far past the first special byte.
func indexSpecial(p []byte) int {
	i := 0
	for ; i+8 <= len(p) && i < 32; i += 8 {
		w := binary.LittleEndian.Uint64(p[i:])
		q := w ^ (lsb * '"')
		b := w ^ (lsb * '\\')
		if m := ((q-lsb)&^q | (b-lsb)&^b) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	if len(p) < 40 {
		for ; i < len(p); i++ {
			if p[i] == '"' || p[i] == '\\' {
				return i
			}
		}
		return -1
	}
	for w := 256; i < len(p); w = min(2*w, 64<<10) {
		win := p[i:min(i+w, len(p))]
		q := bytes.IndexByte(win, '"')
		if q >= 0 {
			win = win[:q]
		}
		if b := bytes.IndexByte(win, '\\'); b >= 0 {
			return i + b
		}
		if q >= 0 {
			return i + q
		}
		i += len(win)
	}
	return -1
}
