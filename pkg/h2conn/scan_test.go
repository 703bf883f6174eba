package h2conn

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"golang.org/x/net/http2"

	"github.com/kwatch/kwatch/internal/testutil"
)

// frames writes one of each frame type RFC 9113 defines, with the flags
// each may carry, as x/net/http2's Framer writes them, and returns the
// bytes and where each frame starts.
func frames(t testing.TB) ([]byte, []int) {
	t.Helper()
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	var starts []int
	mark := func() { starts = append(starts, buf.Len()) }
	for _, write := range []func() error{
		func() error { return fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}) },
		func() error { return fr.WriteSettingsAck() },
		func() error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82, 0x84}, EndHeaders: false,
				Priority: http2.PriorityParam{StreamDep: 0, Weight: 15}, PadLength: 3})
		},
		func() error { return fr.WriteContinuation(1, true, []byte{0x86}) },
		func() error { return fr.WriteData(1, false, []byte(`{"type":"ADDED"}`)) },
		func() error { return fr.WriteDataPadded(1, false, []byte("x"), make([]byte, 5)) },
		func() error { return fr.WriteData(1, true, nil) },
		func() error { return fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 1}) },
		func() error { return fr.WriteRSTStream(3, http2.ErrCodeCancel) },
		func() error { return fr.WritePing(false, [8]byte{1, 2, 3}) },
		func() error { return fr.WritePing(true, [8]byte{1, 2, 3}) },
		func() error { return fr.WriteWindowUpdate(0, 1<<20) },
		func() error { return fr.WriteWindowUpdate(1, 1) },
		func() error {
			return fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: []byte{0x82}, EndHeaders: true, PadLength: 1})
		},
		func() error { return fr.WriteGoAway(3, http2.ErrCodeNo, []byte("bye")) },
	} {
		mark()
		if err := write(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), starts
}

// TestPlausibleHeader: every frame x/net/http2 writes has a plausible
// header, and so has each prefix of it; named bad headers are not.
func TestPlausibleHeader(t *testing.T) {
	b, starts := frames(t)
	for _, at := range starts {
		for n := 0; n <= 9; n++ {
			if !PlausibleHeader(b[at : at+n]) {
				t.Errorf("the header at %d (% x), first %d bytes: not plausible", at, b[at:at+9], n)
			}
		}
	}
	for _, tc := range []struct {
		name string
		h    []byte
	}{
		{"type 10", []byte{0, 0, 4, 10, 0, 0, 0, 0, 1}},
		{"DATA with END_HEADERS", []byte{0, 0, 4, 0, 0x4, 0, 0, 0, 1}},
		{"DATA on stream 0", []byte{0, 0, 4, 0, 0, 0, 0, 0, 0}},
		{"padded DATA of no bytes", []byte{0, 0, 0, 0, 0x8, 0, 0, 0, 1}},
		{"HEADERS with PRIORITY, 4 bytes", []byte{0, 0, 4, 1, 0x20, 0, 0, 0, 1}},
		{"reserved bit set", []byte{0, 0, 4, 0, 0, 0x80, 0, 0, 1}},
		{"SETTINGS of 5 bytes", []byte{0, 0, 5, 4, 0, 0, 0, 0, 0}},
		{"SETTINGS ACK with settings", []byte{0, 0, 6, 4, 1, 0, 0, 0, 0}},
		{"SETTINGS on stream 1", []byte{0, 0, 6, 4, 0, 0, 0, 0, 1}},
		{"PING of 7 bytes", []byte{0, 0, 7, 6, 0, 0, 0, 0, 0}},
		{"PING on stream 1", []byte{0, 0, 8, 6, 0, 0, 0, 0, 1}},
		{"RST_STREAM of 8 bytes", []byte{0, 0, 8, 3, 0, 0, 0, 0, 1}},
		{"PRIORITY on stream 0", []byte{0, 0, 5, 2, 0, 0, 0, 0, 0}},
		{"GOAWAY of 7 bytes", []byte{0, 0, 7, 7, 0, 0, 0, 0, 0}},
		{"WINDOW_UPDATE of 5 bytes", []byte{0, 0, 5, 8, 0, 0, 0, 0, 0}},
		{"CONTINUATION with END_STREAM", []byte{0, 0, 5, 9, 1, 0, 0, 0, 1}},
		{"PUSH_PROMISE of 3 bytes", []byte{0, 0, 3, 5, 0x4, 0, 0, 0, 1}},
	} {
		if PlausibleHeader(tc.h) {
			t.Errorf("%s (% x): plausible", tc.name, tc.h)
		}
	}
}

// textBytes are the bytes of text: printable ASCII, tab, CR and LF.
var textBytes = func() (b []byte) {
	for c := 0x20; c < 0x7f; c++ {
		b = append(b, byte(c))
	}
	return append(b, '\t', '\r', '\n')
}()

// TestTextIsNoFrame: no text is a frame header, whatever its length
// bytes: the type and flags bytes of text never pass together.
func TestTextIsNoFrame(t *testing.T) {
	for _, typ := range textBytes {
		for _, flags := range textBytes {
			for _, l := range [][3]byte{{0, 0, 0}, {0, 0, 4}, {0, 0, 5}, {0, 0, 8}, {'G', 'E', 'T'}} {
				h := []byte{l[0], l[1], l[2], typ, flags, 0, 0, 0, 1}
				if PlausibleHeader(h) {
					t.Fatalf("% x is a plausible header", h)
				}
			}
		}
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		p := make([]byte, 20000)
		for i := range p {
			p[i] = textBytes[rnd.IntN(len(textBytes))]
		}
		var s FrameScan
		if at, v := s.Scan(p, true); v != ScanNone {
			t.Fatalf("text: %v at %d", v, at)
		}
	}
}

// scanOneByOne grows p a byte at a time, as a live capture may show it,
// and returns the first decision.
func scanOneByOne(p []byte, end bool) (int, ScanVerdict) {
	var s FrameScan
	for n := 1; n <= len(p); n++ {
		if at, v := s.Scan(p[:n], false); v != ScanMore {
			return at, v
		}
	}
	return s.Scan(p, end)
}

// directions returns the bytes of each direction of the first
// connection in a capture of testdata/captures (the client's after its
// preface) and where each frame starts.
func directions(t *testing.T, name string) (dirs [2][]byte, starts [2][]int) {
	t.Helper()
	for _, pc := range testutil.ConnPieces(t, filepath.Join("../../testdata/captures", name)) {
		i := 1
		if pc.Client {
			i = 0
		}
		dirs[i] = append(dirs[i], pc.P...)
	}
	dirs[0] = bytes.TrimPrefix(dirs[0], []byte(ClientPreface))
	for i, d := range dirs {
		for at := 0; at+9 <= len(d); {
			starts[i] = append(starts[i], at)
			at += 9 + (int(d[at])<<16 | int(d[at+1])<<8 | int(d[at+2]))
		}
	}
	return dirs, starts
}

// TestScan: the frames of real connections are found from every byte of
// their first frames (and of frames further on): at the start of the next
// frame that can start a chain (not an empty one), whole or a byte at a
// time alike.
func TestScan(t *testing.T) {
	for _, name := range []string{"h2c-watch-lo.pcap", "h2c-gzip-lo.pcap", "h2c-reset-lo.pcap"} {
		dirs, starts := directions(t, name)
		for i, d := range dirs {
			// The next frame that can start a chain: one of 1 to
			// 16 384 bytes on a stream below 2^24.
			next := func(cut int) int {
				for _, s := range starts[i] {
					length := int(d[s])<<16 | int(d[s+1])<<8 | int(d[s+2])
					if s >= cut && length > 0 && length <= 1<<14 && d[s+5] == 0 {
						return s - cut
					}
				}
				return -1
			}
			step := 1
			// Cuts that leave frames enough for a chain.
			last := starts[i][max(0, len(starts[i])-4)]
			for cut := 0; cut < last && cut < 40000; cut += step {
				if cut > 3000 {
					step = 97 // and a sample further on
				}
				want := next(cut)
				if want < 0 {
					break
				}
				// Before the end, an earlier offset whose chain points
				// past the bytes so far may hold the decision back; at
				// the end it is decided, the same whole or a byte at a
				// time.
				var s FrameScan
				if at, v := s.Scan(d[cut:], false); v != ScanMore && (v != ScanFound || at != want) {
					t.Fatalf("%s direction %d cut at %d: %v at %d; want frames at %d, or more bytes", name, i, cut, v, at, want)
				}
				at, v := s.Scan(d[cut:], true)
				if v != ScanFound || at != want {
					t.Fatalf("%s direction %d cut at %d, then the end: %v at %d; want frames at %d", name, i, cut, v, at, want)
				}
				if cut < 300 {
					if at1, v1 := scanOneByOne(d[cut:], true); at1 != at || v1 != v {
						t.Fatalf("%s direction %d cut at %d, a byte at a time: %v at %d; want frames at %d", name, i, cut, v1, at1, want)
					}
				}
			}
		}
	}
}

// TestScanControlFrames: a conversation of every frame type, cut at
// every byte, is found at the next frame that can start a chain: control
// frames are mostly zeros.
func TestScanControlFrames(t *testing.T) {
	b, starts := frames(t)
	for cut := 0; cut < starts[len(starts)-4]; cut++ {
		want := -1
		for _, s := range starts {
			if l := frameLen(b[s:]); s >= cut && l > 0 && l <= 1<<14 {
				want = s - cut
				break
			}
		}
		var s FrameScan
		if at, v := s.Scan(b[cut:], true); v != ScanFound || at != want {
			t.Errorf("cut at %d: %v at %d; want frames at %d", cut, v, at, want)
		}
	}
}

// TestScanEnd: a chain ends with the direction as the rules say, and an
// empty frame starts none.
func TestScanEnd(t *testing.T) {
	b, starts := frames(t)
	const ping, pingAck, settingsAck = 9, 10, 1
	// At the first byte, one frame is enough once the direction ends
	// right after it; not before, and not one cut short.
	one := b[starts[ping]:starts[pingAck]]
	var s FrameScan
	if _, v := s.Scan(one, false); v != ScanMore {
		t.Errorf("one frame: %v, want more", v)
	}
	if at, v := s.Scan(one, true); v != ScanFound || at != 0 {
		t.Errorf("one frame, then the end: %v at %d", v, at)
	}
	s = FrameScan{}
	if _, v := s.Scan(one[:len(one)-1], true); v != ScanNone {
		t.Errorf("one frame cut short, then the end: %v", v)
	}
	// Elsewhere two whole frames and the end are enough, one is not.
	s = FrameScan{}
	if at, v := s.Scan(b[starts[ping]-3:starts[pingAck+1]], true); v != ScanFound || at != 3 {
		t.Errorf("3 bytes, two frames, the end: %v at %d", v, at)
	}
	s = FrameScan{}
	if _, v := s.Scan(b[starts[ping]-3:starts[pingAck]], true); v != ScanNone {
		t.Errorf("3 bytes, one frame, the end: %v", v)
	}
	// An empty frame (a SETTINGS ACK) starts no chain: the next frame
	// that counts does.
	s = FrameScan{}
	if at, v := s.Scan(b[starts[settingsAck]:], true); v != ScanFound || at != starts[settingsAck+1]-starts[settingsAck] {
		t.Errorf("a SETTINGS ACK, then frames: %v at %d", v, at)
	}
}

// TestScanHostile: random bytes are not taken for frames, and what a scan
// holds to decide is bounded; a boundary past MaxJoinSkip is not looked
// for.
func TestScanHostile(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	for i := range 200 {
		p := make([]byte, 1+rnd.IntN(ScanBytes+100))
		for j := range p {
			p[j] = byte(rnd.Uint32())
		}
		var s FrameScan
		at, v := s.Scan(p, true)
		if v == ScanFound {
			// Not impossible, but then its chain must hold.
			if !chainHolds(p, at) {
				t.Fatalf("random bytes %d: frames at %d, but the chain does not hold", i, at)
			}
			t.Logf("random bytes %d: a chain at %d", i, at)
		}
		if len(p) >= ScanBytes && v == ScanMore {
			t.Fatalf("random bytes %d: %d bytes and still more wanted", i, len(p))
		}
	}
	// Frames after more than MaxJoinSkip bytes of junk are not found.
	b, _ := frames(t)
	junk := bytes.Repeat([]byte{'x'}, MaxJoinSkip+1)
	var s FrameScan
	if _, v := s.Scan(append(junk, b...), false); v != ScanNone {
		t.Errorf("frames after %d bytes: %v", len(junk), v)
	}
}

// chainHolds checks what Scan found with x/net/http2's own header reader:
// two frame headers from 0, or three from a later offset (or to the end).
func chainHolds(p []byte, at int) bool {
	need := 3
	if at == 0 {
		need = 2
	}
	for n := 0; n < need; n++ {
		if at == len(p) && n >= need-1 {
			return true
		}
		fh, err := http2.ReadFrameHeader(bytes.NewReader(p[at:]))
		if err != nil || !PlausibleHeader(p[at:min(at+9, len(p))]) {
			return false
		}
		at += 9 + int(fh.Length)
	}
	return true
}

// BenchmarkScanByteAtATime: a FrameScan fed 64 KiB of junk a byte at a
// time costs about what one pass over it does.
func BenchmarkScanByteAtATime(b *testing.B) {
	p := bytes.Repeat([]byte{0xff}, ScanBytes)
	for b.Loop() {
		var s FrameScan
		for n := 1; n <= len(p); n++ {
			s.Scan(p[:n], false)
		}
	}
}

// TestScanKnown: on a connection known to be HTTP/2, two frames are
// enough, or one that ends the direction; for a client (Eager) one whole
// frame at the first byte, even an empty one, without waiting for more.
func TestScanKnown(t *testing.T) {
	b, starts := frames(t)
	const settingsAck, ping = 1, 9
	ack := b[starts[settingsAck]:starts[settingsAck+1]]
	s := FrameScan{Known: true, Eager: true}
	if at, v := s.Scan(ack, false); v != ScanFound || at != 0 {
		t.Errorf("eager, a SETTINGS ACK: %v at %d", v, at)
	}
	s = FrameScan{Known: true, Eager: true}
	if _, v := s.Scan(ack[:len(ack)-1], false); v != ScanMore {
		t.Errorf("eager, a SETTINGS ACK but its last byte: %v", v)
	}
	one := b[starts[ping]:starts[ping+1]]
	s = FrameScan{Known: true}
	if _, v := s.Scan(one, false); v != ScanMore {
		t.Errorf("a PING: %v", v)
	}
	if at, v := s.Scan(one, true); v != ScanFound || at != 0 {
		t.Errorf("a PING, then the end: %v at %d", v, at)
	}
	s = FrameScan{Known: true}
	if at, v := s.Scan(b[starts[ping]:starts[ping+2]], false); v != ScanFound || at != 0 {
		t.Errorf("two frames: %v at %d", v, at)
	}
	s = FrameScan{Known: true}
	if at, v := s.Scan(b[starts[ping]-3:starts[ping+1]], true); v != ScanFound || at != 3 {
		t.Errorf("3 bytes, one frame, the end: %v at %d", v, at)
	}
}

// scanRecords scans p, told records that end at ends, after each record
// as a live direction would; it returns the verdict and the record end at
// which it was decided.
func scanRecords(s *FrameScan, p []byte, ends []int) (at int, v ScanVerdict, when int) {
	for _, e := range ends {
		s.RecordEnd(e)
		if at, v = s.Scan(p[:e], false); v != ScanMore {
			return at, v, e
		}
	}
	return 0, ScanMore, -1
}

// TestScanRecords: where the records of TLS end is known (RecordEnd), a
// record of whole frames shows where frames start as soon as it has come:
// a quiet watch's one DATA frame is not held until more frames follow.
// Real connections, each frame in a record of its own, cut at every byte
// of their first frames (the rest of the cut frame a record), are found
// at the next frame that can start a chain, as without records.
func TestScanRecords(t *testing.T) {
	b, starts := frames(t)
	const data = 4 // a DATA frame of an event
	one := b[starts[data]:starts[data+1]]
	var s FrameScan
	if _, v := s.Scan(one, false); v != ScanMore {
		t.Errorf("one DATA frame, records not told: %v", v)
	}
	s = FrameScan{}
	if at, v, _ := scanRecords(&s, one, []int{len(one)}); v != ScanFound || at != 0 {
		t.Errorf("a record of one DATA frame: %v at %d", v, at)
	}
	// Two frames in two records, or two in one, alike.
	two := b[starts[data]:starts[data+2]]
	for _, ends := range [][]int{{len(one), len(two)}, {len(two)}} {
		s = FrameScan{}
		if at, v, when := scanRecords(&s, two, ends); v != ScanFound || at != 0 || when != ends[0] {
			t.Errorf("records ending at %v: %v at %d, decided at %d", ends, v, at, when)
		}
	}
	delayed := 0
	for _, name := range []string{"h2c-watch-lo.pcap", "h2c-gzip-lo.pcap", "h2c-reset-lo.pcap"} {
		dirs, fs := directions(t, name)
		for i, d := range dirs {
			last := fs[i][max(0, len(fs[i])-4)]
			for cut := 0; cut < last && cut < 3000; cut++ {
				var ends []int
				want, wantEnd := -1, 0
				for j, f := range fs[i] {
					if f <= cut {
						continue
					}
					ends = append(ends, f-cut)
					if prev := fs[i][j-1]; want < 0 && prev >= cut && counts(d[prev:prev+9]) {
						want, wantEnd = prev-cut, f-cut
					}
				}
				if want < 0 {
					break
				}
				var s FrameScan
				at, v, when := scanRecords(&s, d[cut:], ends)
				if v == ScanMore {
					// An earlier offset's chain points past the bytes:
					// the direction's end decides.
					at, v = s.Scan(d[cut:], true)
					when = len(d) - cut + 1
				}
				if v != ScanFound || at != want {
					t.Fatalf("%s direction %d cut at %d, records of frames: %v at %d; want frames at %d", name, i, cut, v, at, want)
				}
				if when > wantEnd {
					// An earlier offset's chain pointed past the bytes
					// so far: its decision waited for them.
					delayed++
				}
			}
		}
	}
	t.Logf("%d cuts decided after the record of their first frame", delayed)
}

// TestScanRecordsLie: a record whose bytes pass for whole frames that fill
// it is taken only as the rules allow: not with a flag its type does not
// define, not for an empty frame, not past an earlier boundary (the
// earliest offset wins), not when its frame jumps over one that ends with
// it, not when it claims bytes the record does not hold; record ends past
// the bounds are not kept.
func TestScanRecordsLie(t *testing.T) {
	b, starts := frames(t)
	const ping, settingsAck, data = 9, 1, 4
	one := bytes.Clone(b[starts[ping]:starts[ping+1]])
	one[4] = 0x8 // PADDED: not a PING's flag
	var s FrameScan
	if _, v, _ := scanRecords(&s, one, []int{len(one)}); v != ScanMore {
		t.Errorf("a PING with a flag it does not define: %v", v)
	}
	ack := b[starts[settingsAck]:starts[settingsAck+1]]
	s = FrameScan{}
	if _, v, _ := scanRecords(&s, ack, []int{len(ack)}); v != ScanMore {
		t.Errorf("a record of an empty frame: %v", v)
	}
	// A DATA frame cut into two records, the second made to look like
	// a frame that fills it: the real frame, from the first record's
	// start, wins.
	payload := make([]byte, 300)
	fake := []byte{0, 0, 100, 0, 0, 0, 0, 0, 1} // DATA on stream 1 of the 100 bytes that follow
	copy(payload[300-109:], fake)
	var buf bytes.Buffer
	_ = http2.NewFramer(&buf, nil).WriteData(1, false, payload)
	whole := buf.Bytes()
	s = FrameScan{}
	if at, v, _ := scanRecords(&s, whole, []int{len(whole) - 109, len(whole)}); v == ScanFound && at != 0 {
		t.Errorf("a DATA frame whose second record looks like a frame: frames at %d; want none from the records, or 0", at)
	}
	// A false frame that jumps over a real one ending with the record
	// is not taken.
	inner := b[starts[ping]:starts[ping+1]] // a PING, 17 bytes
	liar := append([]byte{0, 0, byte(3 + len(inner)), 0, 0, 0, 0, 0, 1, 'x', 'y', 'z'}, inner...)
	s = FrameScan{}
	if at, v, _ := scanRecords(&s, liar, []int{len(liar)}); v == ScanFound && at == 0 {
		t.Errorf("a DATA frame holding a PING that ends with it, in one record: taken at 0")
	}
	// A frame that claims more than its record: no decision from it.
	short := bytes.Clone(b[starts[data]:starts[data+1]])
	s = FrameScan{}
	if _, v, _ := scanRecords(&s, short, []int{len(short) - 1}); v != ScanMore {
		t.Errorf("a DATA frame a byte longer than its record: %v", v)
	}
	// Record ends are bounded in number and place.
	s = FrameScan{}
	for e := 1; e <= 2*maxRecordEnds; e++ {
		s.RecordEnd(e)
	}
	s.RecordEnd(ScanBytes + 1)
	s.RecordEnd(3)
	if len(s.ends) != maxRecordEnds || s.ends[len(s.ends)-1] != maxRecordEnds {
		t.Errorf("%d record ends kept, the last %d", len(s.ends), s.ends[len(s.ends)-1])
	}
	// Random bytes in random records: what is found holds a frame that
	// counts at its offset, and nothing is held past ScanBytes.
	rnd := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		p := make([]byte, 1+rnd.IntN(ScanBytes+100))
		for j := range p {
			p[j] = byte(rnd.Uint32())
		}
		if i%3 == 0 {
			p[0], p[1], p[2] = 0, 0, byte(rnd.IntN(30)) // small lengths, as real frames have
		}
		var ends []int
		for e := 1 + rnd.IntN(40); e < len(p); e += 1 + rnd.IntN(40) {
			ends = append(ends, e)
		}
		ends = append(ends, len(p))
		var s FrameScan
		at, v, _ := scanRecords(&s, p, ends)
		if v == ScanFound && (!PlausibleHeader(p[at:min(at+9, len(p))]) || at+9 > len(p) || !counts(p[at:at+9])) {
			t.Fatalf("random bytes %d: frames at %d, but no frame that counts there", i, at)
		}
		if v == ScanMore && len(p) >= ScanBytes {
			if _, v = s.Scan(p, false); v == ScanMore {
				t.Fatalf("random bytes %d: %d bytes and still more wanted", i, len(p))
			}
		}
	}
}
