package chunk

import (
	"bytes"
	"errors"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
)

// fuzzLimits returns the limits a fuzz input is decoded with: the defaults,
// or small ones (chosen by the seed) so that the fuzzer reaches them.
func fuzzLimits(seed int64) (lim Limits, small bool) {
	if seed&1 == 0 {
		return Limits{}, false
	}
	return Limits{MaxLineBytes: 16, MaxTrailerBytes: 48}, true
}

// FuzzDecoder decodes arbitrary bytes whole and in splits chosen by seed.
// The decoder must not panic, must not consume more than it was given, and
// must report the same callbacks and the same error however the input is
// split. Whatever the standard library's chunked reader accepts, the decoder
// must accept too, with the same data.
func FuzzDecoder(f *testing.F) {
	for i, tt := range decodeTests {
		f.Add([]byte(tt.in+tt.extra), int64(2*i))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed int64) {
		lim, small := fuzzLimits(seed)
		w := decode(in, lim, whole)
		s := decode(in, lim, randomSplits(seed))
		for _, l := range w.log {
			if strings.HasPrefix(l, "BUG") {
				t.Fatalf("whole input: %s\nlog:\n\t%s", l, strings.Join(w.log, "\n\t"))
			}
		}
		if d := diffLogs(s.log, w.log); d != "" {
			t.Fatalf("split input: callbacks differ from whole input at %s", d)
		}
		if s.err != w.err || s.n != w.n || s.done != w.done {
			t.Fatalf("split input gave n=%d err=%q done=%v; whole input gave n=%d err=%q done=%v",
				s.n, s.err, s.done, w.n, w.err, w.done)
		}
		if w.n > len(in) {
			t.Fatalf("consumed %d bytes of %d", w.n, len(in))
		}
		if w.n < len(in) && w.err == "" && !w.done {
			t.Fatalf("consumed %d bytes of %d without error or end of body", w.n, len(in))
		}

		// Close agrees with how the Writes ended.
		switch {
		case w.err != "":
			if errString(w.close) != w.err {
				t.Fatalf("Close = %v after error %s", w.close, w.err)
			}
		case w.done:
			if w.close != nil {
				t.Fatalf("Close = %v after a complete body", w.close)
			}
		default:
			var e *Error
			if !errors.As(w.close, &e) || !errors.Is(w.close, io.ErrUnexpectedEOF) ||
				e.Kind != KindTruncated || e.Offset != int64(w.n) {
				t.Fatalf("Close = %v after %d bytes of an incomplete body; want truncation at %d", w.close, w.n, w.n)
			}
		}

		// The standard library is stricter: whatever it reads to the
		// last-chunk without error must decode here to the same data.
		// (It stops at the last-chunk and leaves the trailer section to
		// its caller, so errors after the last-chunk don't count.)
		if small {
			return
		}
		want, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		if !w.rec.sawLast {
			t.Fatalf("net/http reads %q to the last-chunk; decoder stopped with %q\nlog:\n\t%s",
				want, w.err, strings.Join(w.log, "\n\t"))
		}
		if !bytes.Equal(w.rec.all, want) {
			t.Fatalf("decoded data %q; net/http reads %q", w.rec.all, want)
		}
	})
}

// FuzzSkip writes part of an arbitrary input, skips a gap, and writes the
// rest, whole and in splits: the decoder must not panic, and resync must not
// depend on how the bytes after the gap are split.
func FuzzSkip(f *testing.F) {
	const body = "5\r\nhello\r\n5\r\nworld\r\n3\r\nabc\r\n0\r\n\r\n"
	f.Add([]byte(body), uint16(4), uint16(12), int64(1))
	f.Add([]byte(body), uint16(4), uint16(4), int64(2))
	f.Add([]byte(body), uint16(11), uint16(1), int64(3))
	f.Add([]byte("3\r\nabc\r\n\r\n\r\n1\r\nx\r\n0\r\n\r\n"), uint16(2), uint16(1), int64(4))
	f.Fuzz(func(t *testing.T, in []byte, at, gap uint16, seed int64) {
		if int(at) > len(in) {
			at = uint16(len(in))
		}
		run := func(next splitter) (log []string, n int, err, closeErr string, keep bool) {
			rec := newRecorder()
			d := NewDecoder(rec, Limits{})
			n, werr := d.Write(in[:at])
			if werr != nil {
				return rec.lines(), n, errString(werr), errString(d.Close()), false
			}
			keep = d.Skip(int64(gap))
			if !keep {
				rec.lost()
			}
			rest := in[at:]
			for len(rest) > 0 {
				k := next(len(rest))
				m, werr := d.Write(rest[:k])
				if m < 0 || m > k {
					t.Fatalf("Write returned %d for %d bytes", m, k)
				}
				n += m
				rest = rest[k:]
				if werr != nil {
					err = errString(werr)
					break
				}
				if m < k {
					break
				}
			}
			if int64(n)+int64(gap) != d.Offset() && int64(n) != d.Offset() {
				t.Fatalf("consumed %d bytes and skipped %d, but Offset is %d", n, gap, d.Offset())
			}
			return rec.lines(), n, err, errString(d.Close()), keep
		}
		wlog, wn, werr, wclose, wkeep := run(whole)
		slog, sn, serr, sclose, skeep := run(randomSplits(seed))
		for _, l := range wlog {
			if strings.HasPrefix(l, "BUG") {
				t.Fatalf("whole input: %s\nlog:\n\t%s", l, strings.Join(wlog, "\n\t"))
			}
		}
		if d := diffLogs(slog, wlog); d != "" {
			t.Fatalf("split input: callbacks differ from whole input at %s", d)
		}
		if sn != wn || serr != werr || sclose != wclose || skeep != wkeep {
			t.Fatalf("split input gave n=%d err=%q close=%q keep=%v; whole input gave n=%d err=%q close=%q keep=%v",
				sn, serr, sclose, skeep, wn, werr, wclose, wkeep)
		}
	})
}
