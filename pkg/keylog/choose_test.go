package keylog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		flag, env string
		want      Choice
	}{
		{"neither", "", "", Choice{}},
		{"flag", "a.log", "", Choice{Path: "a.log", Origin: FromFlag}},
		{"env", "", "b.log", Choice{Path: "b.log", Origin: FromEnv}},
		{"flag wins over env", "a.log", "b.log", Choice{Path: "a.log", Origin: FromFlag}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Choose(tc.flag, tc.env); got != tc.want {
				t.Errorf("Choose(%q, %q) = %+v, want %+v", tc.flag, tc.env, got, tc.want)
			}
		})
	}
}

// fakeCaptureFormat names captures by their magic numbers, as
// pcap.CaptureFormat does (pkg/pcap imports keylog: it cannot be used here).
func fakeCaptureFormat(prefix []byte) string {
	switch {
	case bytes.HasPrefix(prefix, []byte{0xd4, 0xc3, 0xb2, 0xa1}):
		return "pcap"
	case bytes.HasPrefix(prefix, []byte{0x0a, 0x0d, 0x0d, 0x0a}):
		return "pcapng"
	case bytes.HasPrefix(prefix, []byte{0x1f, 0x8b}):
		return "gzip'd data"
	}
	return ""
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAddChoice: each kind of file, named by --tls-keylog or by
// SSLKEYLOGFILE, with the capture live or not: what is read, what is
// said, and what ends the run.
func TestAddChoice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := []byte("# written by a test\nCLIENT_RANDOM " + random + " " + strings.Repeat("22", 48) + "\n")
	pcapHead := append([]byte{0xd4, 0xc3, 0xb2, 0xa1}, make([]byte, 20)...)
	files := map[string][]byte{
		"keys.log":      keys,
		"keys.log.gz":   gzipped(t, keys),
		"watch.pcap":    pcapHead,
		"watch.pcapng":  append([]byte{0x0a, 0x0d, 0x0d, 0x0a}, make([]byte, 20)...),
		"watch.pcap.gz": gzipped(t, pcapHead),
		"notes.txt.gz":  gzipped(t, []byte("some notes, no keys")),
		"short":         []byte("ab"), // too short to sniff: read as a key log
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	const (
		flag = FromFlag
		env  = FromEnv
	)
	for _, tc := range []struct {
		name   string
		file   string
		origin Origin
		live   bool
		// wantKind 0: read, no problem.
		wantKind  Kind
		wantFatal bool
		// wantMsg is the Problem's text, with DIR for the directory.
		wantMsg  string
		wantKeys bool
	}{
		{name: "flag: a key log", file: "keys.log", origin: flag, wantKeys: true},
		{name: "env: a key log", file: "keys.log", origin: env, wantKeys: true},
		{name: "flag: too short to sniff", file: "short", origin: flag},
		{name: "flag: gzip'd key log", file: "keys.log.gz", origin: flag, wantKind: Gzipped, wantFatal: true,
			wantMsg: "--tls-keylog DIR/keys.log.gz: a gzip'd key log: gunzip it first (a key log is read as text, and read again as it grows)"},
		{name: "env: gzip'd key log", file: "keys.log.gz", origin: env, wantKind: Gzipped,
			wantMsg: "SSLKEYLOGFILE=DIR/keys.log.gz is a gzip'd key log; it is not read (gunzip it first: a key log is read as text)"},
		{name: "flag: a pcap", file: "watch.pcap", origin: flag, wantKind: Capture, wantFatal: true,
			wantMsg: "--tls-keylog DIR/watch.pcap: a pcap file, not a key log: give the capture as FILE and the key log (lines such as CLIENT_RANDOM …) with --tls-keylog"},
		{name: "flag: a pcapng, live", file: "watch.pcapng", origin: flag, live: true, wantKind: Capture, wantFatal: true,
			wantMsg: "--tls-keylog DIR/watch.pcapng: a pcapng file, not a key log: give the capture as FILE and the key log (lines such as CLIENT_RANDOM …) with --tls-keylog"},
		{name: "env: a gzip'd pcap", file: "watch.pcap.gz", origin: env, wantKind: Capture,
			wantMsg: "SSLKEYLOGFILE=DIR/watch.pcap.gz is a gzip'd pcap file, not a key log; it is not read (TLS is decrypted only with keys inside the capture)"},
		{name: "flag: other gzip'd data", file: "notes.txt.gz", origin: flag, wantKind: Capture, wantFatal: true,
			wantMsg: "--tls-keylog DIR/notes.txt.gz: a gzip'd data file, not a key log: give the capture as FILE and the key log (lines such as CLIENT_RANDOM …) with --tls-keylog"},
		{name: "flag: absent", file: "later.log", origin: flag, wantKind: Absent, wantFatal: true,
			wantMsg: "--tls-keylog: open DIR/later.log: no such file or directory"},
		{name: "flag: absent, live", file: "later.log", origin: flag, live: true, wantKind: Absent,
			wantMsg: "--tls-keylog DIR/later.log does not exist yet; it is read when it appears"},
		{name: "env: absent", file: "later.log", origin: env, wantKind: Absent,
			wantMsg: "SSLKEYLOGFILE=DIR/later.log does not exist yet; it is read when it appears"},
		{name: "flag: a directory", file: "adir", origin: flag, live: true, wantKind: Unreadable, wantFatal: true,
			wantMsg: "--tls-keylog: read DIR/adir: is a directory"},
		{name: "env: a directory", file: "adir", origin: env, wantKind: Unreadable,
			wantMsg: "SSLKEYLOGFILE=DIR/adir cannot be read (read DIR/adir: is a directory); TLS is decrypted only with keys inside the capture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := New()
			c := Choice{Path: filepath.Join(dir, tc.file), Origin: tc.origin}
			p := l.AddChoice(c, ChoiceOptions{Live: tc.live, CaptureFormat: fakeCaptureFormat})
			if _, found := l.Lookup(theRandom()); found != tc.wantKeys {
				t.Errorf("keys found: %v, want %v", found, tc.wantKeys)
			}
			if tc.wantKind == 0 {
				if p != nil {
					t.Fatalf("problem %q, want none", p)
				}
				return
			}
			if p == nil {
				t.Fatalf("no problem, want kind %d: %s", tc.wantKind, tc.wantMsg)
			}
			if p.Kind != tc.wantKind || p.Fatal != tc.wantFatal || p.Choice != c {
				t.Errorf("kind %d, fatal %v, choice %+v; want %d, %v, %+v", p.Kind, p.Fatal, p.Choice, tc.wantKind, tc.wantFatal, c)
			}
			if want := strings.ReplaceAll(tc.wantMsg, "DIR", dir); p.Error() != want {
				t.Errorf("message\n%s\nwant\n%s", p.Error(), want)
			}
			if absent := errors.Is(p, fs.ErrNotExist); absent != (tc.wantKind == Absent) {
				t.Errorf("errors.Is(p, fs.ErrNotExist) = %v for kind %d", absent, p.Kind)
			}
			// A file not read now is read when it appears only if it was
			// kept: Absent ones are.
			if l.HasFiles() != (tc.wantKind == Absent) {
				t.Errorf("HasFiles() = %v for kind %d", l.HasFiles(), p.Kind)
			}
		})
	}
}

func TestAddChoiceNone(t *testing.T) {
	t.Parallel()
	l := New()
	if p := l.AddChoice(Choose("", ""), ChoiceOptions{}); p != nil || l.Given() {
		t.Errorf("problem %v, given %v; want none", p, l.Given())
	}
}

// TestAddChoiceNoCaptureFormat: without a CaptureFormat a gzip'd key log is
// still told, and a capture is read as a key log (its lines do not parse).
func TestAddChoiceNoCaptureFormat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := []byte("CLIENT_RANDOM " + random + " " + strings.Repeat("22", 48) + "\n")
	gz, pc := filepath.Join(dir, "keys.log.gz"), filepath.Join(dir, "watch.pcap")
	if err := os.WriteFile(gz, gzipped(t, keys), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pc, []byte{0xd4, 0xc3, 0xb2, 0xa1, 0, 0}, 0o600); err != nil {
		t.Fatal(err)
	}
	if p := New().AddChoice(Choice{Path: gz, Origin: FromEnv}, ChoiceOptions{}); p == nil || p.Kind != Gzipped {
		t.Errorf("gzip'd key log: %v, want kind Gzipped", p)
	}
	if p := New().AddChoice(Choice{Path: pc, Origin: FromFlag}, ChoiceOptions{}); p != nil {
		t.Errorf("pcap without CaptureFormat: %v, want it read", p)
	}
}
