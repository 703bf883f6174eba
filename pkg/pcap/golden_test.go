package pcap_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"github.com/kwatch/kwatch/internal/testutil"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kwatch/kwatch/pkg/diff"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/health"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/rewatch"
	"github.com/kwatch/kwatch/pkg/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// captureDir holds the captures with golden outputs beside them:
// NAME.golden (pretty, color off, --all-http) and NAME.golden.jsonl (-o json
// --all-http --wire). recordedDir holds the recordings of `make record`,
// each scenario with its events file; they have golden outputs too.
const (
	captureDir  = "../../testdata/pcap"
	recordedDir = "../../testdata/captures"
)

type mode struct {
	suffix string
	opt    printer.Options
	json   bool
	diff   bool // --diff; only for the real captures (not gen-*)
}

var modes = []mode{
	{suffix: ".golden", opt: printer.Options{AllHTTP: true}},
	{suffix: ".golden.jsonl", opt: printer.Options{AllHTTP: true, Wire: true}, json: true},
	{suffix: ".diff.golden", diff: true},
}

// decode runs the capture through the same path as kwatch pcap.
func decode(t *testing.T, data []byte, name string, m mode, maxFeed int, oneByte bool) []byte {
	t.Helper()
	var out bytes.Buffer
	var p printer.Printer
	if m.json {
		p = printer.NewJSON(&out, m.opt)
	} else {
		p = printer.NewPretty(&out, m.opt)
	}
	r := bytes.NewReader(data)
	var src io.Reader = r
	if oneByte {
		src = iotest.OneByteReader(r)
	}
	var sink record.Sink = health.New(p)
	if m.diff {
		sink = diff.New(sink, diff.Options{PerWatch: true})
	}
	sink = rewatch.New(sink)
	budget := event.NewBudget(0)
	// A 1 MiB bound per gzip member, so that gen-gzip-bomb's 16 MiB
	// member is cut off quickly.
	opt := pcap.Options{Name: name, MaxFeed: maxFeed, HTTP: wire.Options{Limits: exchange.Limits{Budget: budget, MaxInflatedBytes: 1 << 20}}, Keys: keysFor(t, name)}
	if _, err := pcap.Read(context.Background(), src, opt, sink); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("%s: %d bytes still reserved from the budget after the capture ended", name, h)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// A redacted value's tag is keyed afresh for each run (event's
	// redactKey): the golden files show it as 8 underscores.
	return redactedTag.ReplaceAll(out.Bytes(), []byte(event.Redacted+"________"))
}

// redactedTag matches a redacted Secret value's tag as the JSON Lines
// output writes it.
var redactedTag = regexp.MustCompile(event.Redacted + `[0-9a-f]{8}`)

// keysFor returns the TLS key log of a capture of a TLS scenario
// (NAME-any.pcap, NAME-lo.pcap: NAME.keys.log beside it), or an empty one.
// A pcapng holds its keys itself.
func keysFor(t testing.TB, name string) *keylog.Log {
	keys := keylog.New()
	if !strings.HasSuffix(name, ".pcap") {
		return keys
	}
	base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".pcap"), "-any"), "-lo")
	for _, dir := range []string{captureDir, recordedDir} {
		data, err := os.ReadFile(filepath.Join(dir, base+".keys.log"))
		if err == nil {
			keys.Add(data, base+".keys.log")
			return keys
		}
		if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return keys
}

func captures(t *testing.T) []string {
	var files []string
	for _, dir := range []string{captureDir, recordedDir} {
		for _, pat := range []string{"*.pcap", "*.pcapng", "*.pcap.gz"} {
			m, err := filepath.Glob(filepath.Join(dir, pat))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, m...)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no captures in %s", captureDir)
	}
	return files
}

func goldenName(file, suffix string) string {
	base := file
	for _, ext := range []string{".gz", ".pcapng", ".pcap"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base + suffix
}

// TestGolden decodes every capture in testdata/pcap whole, with reassembled
// bytes fed to HTTP decoding one byte at a time, and with the file read one
// byte at a time, and compares each output with the same golden file.
func TestGolden(t *testing.T) {
	for _, file := range captures(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(file)
		for _, m := range modes {
			if m.diff && strings.HasPrefix(name, "gen-") {
				continue
			}
			t.Run(name+m.suffix, func(t *testing.T) {
				t.Parallel()
				got := decode(t, data, name, m, 0, false)
				golden := goldenName(file, m.suffix)
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./pkg/pcap -update to create it)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("output differs from %s:\n%s", golden, firstDiff(want, got))
				}
				if testing.Short() && len(data) > 64<<10 {
					return
				}
				if split := decode(t, data, name, m, 1, false); !bytes.Equal(split, want) {
					t.Errorf("fed one byte at a time, output differs from %s:\n%s", golden, firstDiff(want, split))
				}
				if ob := decode(t, data, name, m, 0, true); !bytes.Equal(ob, want) {
					t.Errorf("file read one byte at a time, output differs from %s:\n%s", golden, firstDiff(want, ob))
				}
			})
		}
	}
}

// firstDiff shows the first line that differs.
func firstDiff(want, got []byte) string {
	i, w, g, ok := testutil.FirstDiff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n"))
	if !ok {
		return "(no line differs)"
	}
	return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, clip(w), clip(g))
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
