package phrase

import "testing"

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 80, "short"},
		{"abcdef", 3, "abc…"},
		{"aé", 2, "a…"}, // é is 2 bytes: not cut in its middle
		{"", 0, ""},
		{"\x80\x80", 1, "\x80…"},
		{"\x80\x80\x80\x80\x80\x80", 4, "\x80\x80\x80\x80…"}, // not UTF-8: cut where asked
	} {
		if got := Clip(tc.s, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	if got := ClipCounted("abcdef", 2); got != "ab… (4 bytes more)" {
		t.Errorf("ClipCounted: %q", got)
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 chunks"}, {1, "1 chunk"}, {2, "2 chunks"}} {
		if got := Count(tc.n, "chunk", "chunks"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if Plural(1, "event") != "event" || Plural(2, "event") != "events" {
		t.Error("Plural")
	}
}
