package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/kwatch/kwatch/internal/testutil"
	"io"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// frameLog runs a Framer and logs, as text, every frame and problem and
// the Framer's state at the end, for the comparison of two runs.
type frameLog struct {
	t        *testing.T
	lines    []string
	problems int
	fr       *Framer
	// frames kept for the checks against the input.
	frames []*Frame
	// recycle: each frame is copied for the checks and given back to the
	// Framer (Recycle), as the carrier does.
	recycle bool
}

func newFrameLog(t *testing.T, f Format, max int64) *frameLog {
	l := &frameLog{t: t}
	l.fr = NewFramer(f, max, func(fr *Frame) {
		l.lines = append(l.lines, fmt.Sprintf("frame %d off=%d len=%d spans=%v unlisted=%d/%d oversize=%v damaged=%v data=%q",
			fr.Serial, fr.Offset, fr.Length, fr.Spans, fr.UnlistedChunks, fr.UnlistedBytes, fr.Oversize, fr.Damaged, fr.Data))
		if !l.recycle {
			l.frames = append(l.frames, fr)
			return
		}
		kept := *fr
		kept.Spans = slices.Clone(fr.Spans)
		l.frames = append(l.frames, &kept)
		l.fr.Recycle(fr)
	}, func(p FrameProblem) {
		l.problems++
		l.lines = append(l.lines, fmt.Sprintf("problem %s @%d (%s)", p.Kind, p.Offset, p.Detail))
	})
	return l
}

func (l *frameLog) state(when string) {
	l.lines = append(l.lines, fmt.Sprintf("%s: offset=%d inFrame=%v serial=%d firstChunk=%d",
		when, l.fr.Offset(), l.fr.InFrame(), l.fr.Serial(), l.fr.FirstChunk()))
}

// fuzzChunks cuts data into chunks at places chosen by rng (how a server
// chunked the body) and loses gapLen bytes at gapAt (how a capture lost
// them). The chunks and the gap are the same for both runs of an input;
// only how each chunk is split into writes differs.
type fuzzChunks struct {
	chunks [][]byte
	gapAt  int // index of the chunk before which the gap lies, -1 for none
	gapLen int64
}

func cutChunks(data []byte, rng *rand.Rand, gapAt, gapLen uint16) fuzzChunks {
	var fc fuzzChunks
	fc.gapAt = -1
	lost := -1
	if gapLen > 0 && int(gapAt) < len(data) {
		lost = int(gapAt)
	}
	for len(data) > 0 || lost == 0 {
		if lost == 0 {
			n := min(int(gapLen), len(data))
			fc.gapAt, fc.gapLen = len(fc.chunks), int64(gapLen)
			data = data[n:]
			lost = -1
			continue
		}
		k := 1 + rng.Intn(len(data))
		if rng.Intn(3) == 0 {
			k = 1 + rng.Intn(min(len(data), 4))
		}
		if lost > 0 && k > lost {
			k = lost
		}
		fc.chunks = append(fc.chunks, data[:k])
		data = data[k:]
		if lost > 0 {
			lost -= k
		}
	}
	return fc
}

// run feeds the chunks, each in writes chosen by split (nil: one write per
// chunk), and closes the Framer. decode, when not nil, is given to
// DecodeWith.
func (fc fuzzChunks) run(t *testing.T, f Format, max int64, spans int, split *rand.Rand, decode *DecodeOptions) *frameLog {
	l := newFrameLog(t, f, max)
	l.recycle = split != nil
	l.fr.LimitSpans(spans)
	if decode != nil {
		l.fr.DecodeWith(*decode)
	}
	for i, c := range fc.chunks {
		if i == fc.gapAt {
			l.fr.Gap(fc.gapLen)
			l.state("after gap")
		}
		l.fr.CarrierStart()
		for len(c) > 0 {
			k := len(c)
			if split != nil {
				k = 1 + split.Intn(len(c))
			}
			l.fr.Write(c[:k], i)
			c = c[k:]
		}
		l.state(fmt.Sprintf("chunk %d", i))
	}
	if fc.gapAt == len(fc.chunks) {
		l.fr.Gap(fc.gapLen)
		l.state("after gap")
	}
	l.fr.Close()
	l.state("closed")
	return l
}

// FuzzFramer frames arbitrary bytes as a JSON or protobuf watch body, cut
// into chunks chosen by seed, with an optional gap. Whether each chunk comes
// in one write or in many must not change anything; the frames must tile
// the bytes they came from; and a body that is a clean sequence of JSON
// objects (or of protobuf frames) must be framed exactly into them.
//
// The seed corpus is testdata/fuzz/FuzzFramer (see framerSeeds).
func FuzzFramer(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, proto bool, seed int64, max uint8, gapAt, gapLen uint16) {
		format := FormatJSON
		if proto {
			format = FormatProtobuf
		}
		limit := int64(0) // the default
		if max > 0 {
			limit = int64(max)
		}
		rng := rand.New(rand.NewSource(seed))
		fc := cutChunks(data, rng, gapAt, gapLen)
		spans := 0 // the default
		if seed&2 != 0 {
			spans = 1 + int(seed>>2&3)
		}
		opt := DecodeOptions{ShowSecrets: seed&1 == 0}
		w := fc.run(t, format, limit, spans, nil, nil)
		s := fc.run(t, format, limit, spans, rng, &opt)
		if d := diffLines(w.lines, s.lines); d != "" {
			t.Fatalf("chunks split into writes, events decoded as framed: framing differs from one write per chunk at %s", d)
		}
		d := fc.run(t, format, limit, spans, nil, &opt)
		if diff := diffLines(w.lines, d.lines); diff != "" {
			t.Fatalf("events decoded as framed: framing differs at %s", diff)
		}
		checkFrames(t, data, fc, w, format)
		// Whatever a frame holds, decoding it must not panic; an event
		// decoded as it was framed is decoded as Decode does.
		for _, fr := range w.frames {
			if fr.Data != nil {
				_, _ = Decode(format, fr.Data, opt)
			}
		}
		for _, fr := range append(d.frames, s.frames...) {
			if fr.Decoded == nil && fr.DecodeErr == nil {
				continue
			}
			ev, err := Decode(format, fr.Data, opt)
			if !reflect.DeepEqual(ev, fr.Decoded) || fmt.Sprint(err) != fmt.Sprint(fr.DecodeErr) {
				t.Fatalf("frame %q decoded as framed: %+v, %v; Decode: %+v, %v", fr.Data, fr.Decoded, fr.DecodeErr, ev, err)
			}
		}
	})
}

// checkFrames checks the frames of one run against the input.
func checkFrames(t *testing.T, data []byte, fc fuzzChunks, l *frameLog, f Format) {
	t.Helper()
	prefix := int64(0)
	if f == FormatProtobuf {
		prefix = 4
	}
	var prevEnd int64
	for _, fr := range l.frames {
		if fr.Offset < prevEnd || fr.Length <= 0 {
			t.Fatalf("frame %d at %d, %d bytes, overlaps the previous one ending at %d", fr.Serial, fr.Offset, fr.Length, prevEnd)
		}
		prevEnd = fr.Offset + fr.Length
		var spanned int64
		for _, sp := range fr.Spans {
			spanned += sp.Bytes
		}
		if !fr.Damaged && spanned+fr.UnlistedBytes != fr.Length {
			t.Fatalf("frame %d of %d bytes has spans %v", fr.Serial, fr.Length, fr.Spans)
		}
		// Without a gap, a frame's bytes are the input's at its offset.
		if fr.Oversize || fr.Damaged || fc.gapAt >= 0 {
			continue
		}
		if fr.Offset+fr.Length > int64(len(data)) || fr.Length < prefix {
			t.Fatalf("frame %d at %d, %d bytes, is not inside the %d bytes of input", fr.Serial, fr.Offset, fr.Length, len(data))
		}
		if in := data[fr.Offset+prefix : fr.Offset+fr.Length]; !bytes.Equal(in, fr.Data) {
			t.Fatalf("frame %d at %d holds %q; the input there is %q", fr.Serial, fr.Offset, fr.Data, in)
		}
	}
	if fc.gapAt >= 0 || l.fr.max != DefaultMaxEventBytes {
		return
	}
	// A clean sequence of events: exactly those frames, no problem.
	want, ok := jsonObjects(data)
	switch f {
	case FormatProtobuf:
		want, ok = protoFrames(data)
	case FormatCBOR:
		want, ok = cborItems(data)
	}
	if !ok {
		return
	}
	var got []string
	for _, fr := range l.frames {
		got = append(got, string(fr.Data))
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) || l.problems > 0 {
		t.Fatalf("a clean stream of %d events %q framed as:\n\t%s", len(want), data, strings.Join(l.lines, "\n\t"))
	}
}

// protoFrames splits data into the payloads of length-prefixed frames; ok
// is false when data is anything else.
func protoFrames(data []byte) ([]string, bool) {
	var out []string
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, false
		}
		n := int(data[0])<<24 | int(data[1])<<16 | int(data[2])<<8 | int(data[3])
		if len(data)-4 < n {
			return nil, false
		}
		out = append(out, string(data[4:4+n]))
		data = data[4+n:]
	}
	return out, true
}

// jsonObjects splits data into the JSON objects encoding/json reads from it
// one after another, each followed by whitespace; ok is false when data is
// anything else.
func jsonObjects(data []byte) ([]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []string
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err == io.EOF {
			return out, true
		}
		if err != nil || len(raw) == 0 || raw[0] != '{' {
			return nil, false
		}
		out = append(out, string(raw))
	}
}

// diffLines describes the first line where got differs from want, or "".
func diffLines(want, got []string) string {
	i, w, g, ok := testutil.FirstDiff(want, got)
	if !ok {
		return ""
	}
	return fmt.Sprintf("line %d:\n  one write: %s\n  split:     %s\none write per chunk:\n\t%s", i, w, g, strings.Join(want, "\n\t"))
}
