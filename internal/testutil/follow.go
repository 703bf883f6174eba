package testutil

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// Piece is bytes one side of a connection sent.
type Piece struct {
	Client bool
	P      []byte
}

// Feed hands the pieces, in order, to client or server, each cut into
// writes of at most step bytes (0: whole), all seen at time t: how the
// followers' tests prove that their output does not depend on the split.
func Feed(pieces []Piece, step int, t time.Time, client, server func([]byte, time.Time)) {
	for _, pc := range pieces {
		f := server
		if pc.Client {
			f = client
		}
		for p := pc.P; len(p) > 0; {
			k := len(p)
			if step > 0 {
				k = min(k, step)
			}
			f(p[:k], t)
			p = p[k:]
		}
	}
}

// RecordLines returns a sink that keeps every record as a line "TYPE
// JSON" (e.g. "*record.Event {…}"), and those lines.
func RecordLines(t testing.TB) (record.Sink, *[]string) {
	var out []string
	return record.SinkFunc(func(r record.Record) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%T %s", r, b))
	}), &out
}

// Count returns how many lines contain sub.
func Count(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}
