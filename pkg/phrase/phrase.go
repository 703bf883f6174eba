// Package phrase holds the small text helpers kwatch's records and outputs
// share: cutting text that may be long (a status line, a server's message,
// an object's name) at a UTF-8 rune boundary, and counting nouns.
package phrase

import (
	"fmt"
	"unicode/utf8"
)

// Clip returns s cut to at most n bytes, with "…" after the cut; s itself
// when it is no longer. The cut moves back (by at most 3 bytes, the most
// a UTF-8 rune has after its first) so as not to split a rune; bytes that
// are not UTF-8 (a capture's) are cut at n.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeCut(s, n)] + "…"
}

// runeCut returns where to cut s (longer than n) at or before n so as not
// to split a UTF-8 rune.
func runeCut(s string, n int) int {
	cut := n
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		return n // not UTF-8: cut where asked
	}
	return cut
}

// ClipCounted is Clip that says how many bytes it cut: "… (42 bytes
// more)", for details a reader may want the size of.
func ClipCounted(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = runeCut(s, n)
	return s[:n] + fmt.Sprintf("… (%d bytes more)", len(s)-n)
}

// Count returns n with its noun: one when n is 1, else many ("1 chunk",
// "3 chunks", "0 entries").
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Plural returns word for n of 1, else word with an "s".
func Plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
