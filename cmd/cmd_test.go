package cmd

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func run(t *testing.T, stdin []byte, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := IOStreams{In: bytes.NewReader(stdin), Out: &out, ErrOut: &errOut,
		Getenv: func(k string) string { return env[k] }}
	code := Execute(context.Background(), streams, args)
	return out.String(), errOut.String(), code
}

const watchCapture = "../testdata/pcap/watch-timeout-any.pcap"

func TestPcapEventsAndExitCode(t *testing.T) {
	out, errOut, code := run(t, nil, nil, "pcap", watchCapture)
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"ADDED     ConfigMap kube-system/coredns  rv 151  chunk 0x322 = 802 bytes",
		"MODIFIED  ConfigMap kube-system/coredns  rv 152  chunk 0x3d1 = 977 bytes",
		"MODIFIED  ConfigMap kube-system/coredns  rv 153  chunk 0x423 = 1059 bytes",
		"DELETED   ConfigMap kube-system/coredns  rv 154  chunk 0x422 = 1058 bytes",
		"end: last-chunk · 4 events: 1 ADDED, 2 MODIFIED, 1 DELETED · 4 chunks",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colors on a pipe with --color auto")
	}
}

func TestPcapStdin(t *testing.T) {
	data, err := os.ReadFile(watchCapture)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, _, _ := run(t, nil, nil, "pcap", "-o", "json", watchCapture)
	fromStdin, errOut, code := run(t, data, nil, "pcap", "-o", "json", "-")
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if fromFile != fromStdin {
		t.Error("stdin and file outputs differ")
	}
	if n := strings.Count(fromStdin, `"record":"event"`); n != 4 {
		t.Errorf("%d events in JSON, want 4", n)
	}
}

func TestPcapWire(t *testing.T) {
	out, _, _ := run(t, nil, nil, "pcap", "--wire", watchCapture)
	if !strings.Contains(out, "33 32 32 0d 0a") { // "322\r\n"
		t.Errorf("--wire output lacks the size line bytes of chunk 0x322:\n%s", out)
	}
	if !strings.Contains(out, "last-chunk 30 0d 0a 0d 0a") {
		t.Errorf("--wire output lacks the last-chunk bytes:\n%s", out)
	}
}

func TestColor(t *testing.T) {
	out, _, _ := run(t, nil, nil, "pcap", "--color", "always", watchCapture)
	if !strings.Contains(out, "\x1b[32mADDED") {
		t.Errorf("--color always: ADDED not green:\n%q", out)
	}
	out, _, _ = run(t, nil, map[string]string{"NO_COLOR": "1"}, "pcap", "--color", "always", watchCapture)
	if !strings.Contains(out, "\x1b[") {
		t.Error("--color always must win over NO_COLOR")
	}
}

func TestNotACapture(t *testing.T) {
	f := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(f, []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, nil, nil, "pcap", f)
	if code != ExitUsage {
		t.Errorf("exit %d, want %d", code, ExitUsage)
	}
	want := "kwatch: " + f + ": not a pcap or pcapng file (magic 0x68656c6c)\n"
	if errOut != want || out != "" {
		t.Errorf("stderr %q, want %q; stdout %q", errOut, want, out)
	}
}

// TestSwappedKeylogAndCapture: a key log given as the capture, or a capture
// given as the key log, is named for what it is, with what to do.
func TestSwappedKeylogAndCapture(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.log")
	if err := os.WriteFile(keys, []byte("# SSLKEYLOGFILE\nCLIENT_HANDSHAKE_TRAFFIC_SECRET "+strings.Repeat("ab", 32)+" "+strings.Repeat("cd", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, nil, nil, "pcap", keys)
	want := "kwatch: " + keys + ": not a pcap or pcapng file: it reads as a TLS key log (give it with --tls-keylog, and the capture as FILE)\n"
	if code != ExitUsage || errOut != want {
		t.Errorf("key log as the capture: exit %d, stderr %q; want %q", code, errOut, want)
	}
	_, errOut, code = run(t, nil, nil, "pcap", "--tls-keylog", watchCapture, keys)
	want = "kwatch: --tls-keylog " + watchCapture + ": a pcap file, not a key log: give the capture as FILE and the key log (lines such as CLIENT_RANDOM …) with --tls-keylog\n"
	if code != ExitUsage || errOut != want {
		t.Errorf("capture as the key log: exit %d, stderr %q; want %q", code, errOut, want)
	}
	// SSLKEYLOGFILE naming a capture is said and not read (it is the
	// environment's, so the run goes on), not 17 lines that do not parse.
	_, errOut, code = run(t, nil, map[string]string{"SSLKEYLOGFILE": watchCapture}, "pcap", watchCapture)
	want = "kwatch: SSLKEYLOGFILE=" + watchCapture + " is a pcap file, not a key log; it is not read (TLS is decrypted only with keys inside the capture)\n"
	if code != ExitOK || errOut != want {
		t.Errorf("SSLKEYLOGFILE naming a capture: exit %d, stderr %q; want %q", code, errOut, want)
	}
	// gzip'd, each is named for what it holds, not by gzip's magic.
	gzKeys, gzCapture := gzipFile(t, keys), gzipFile(t, watchCapture)
	for _, c := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{nil, []string{gzKeys}, ExitUsage,
			"kwatch: " + gzKeys + ": not a pcap or pcapng file: it reads as a gzip'd TLS key log (gunzip it, give it with --tls-keylog, and the capture as FILE)\n"},
		{nil, []string{"--tls-keylog", gzKeys, watchCapture}, ExitUsage,
			"kwatch: --tls-keylog " + gzKeys + ": a gzip'd key log: gunzip it first (a key log is read as text, and read again as it grows)\n"},
		{nil, []string{"--tls-keylog", gzCapture, watchCapture}, ExitUsage,
			"kwatch: --tls-keylog " + gzCapture + ": a gzip'd pcap file, not a key log: give the capture as FILE and the key log (lines such as CLIENT_RANDOM …) with --tls-keylog\n"},
		{map[string]string{"SSLKEYLOGFILE": gzKeys}, []string{watchCapture}, ExitOK,
			"kwatch: SSLKEYLOGFILE=" + gzKeys + " is a gzip'd key log; it is not read (gunzip it first: a key log is read as text)\n"},
	} {
		_, errOut, code = run(t, nil, c.env, append([]string{"pcap"}, c.args...)...)
		if code != c.code || errOut != c.want {
			t.Errorf("%v %v: exit %d, stderr %q; want %d, %q", c.env, c.args, code, errOut, c.code, c.want)
		}
	}
}

// gzipFile writes a gzip'd copy of the file at path into the test's
// temporary folder and returns its path.
func gzipFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path)+".gz")
	if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMissingFile(t *testing.T) {
	_, errOut, code := run(t, nil, nil, "pcap", "/nonexistent/x.pcap")
	if code != ExitUsage || !strings.Contains(errOut, "no such file") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"pcap", "-o", "yaml", watchCapture},
		{"pcap", "--color", "sometimes", watchCapture},
		{"pcap", "--port", "70000", watchCapture},
		{"pcap"},
		{"pcap", "--no-such-flag", watchCapture},
	} {
		_, errOut, code := run(t, nil, nil, args...)
		if code != ExitUsage || !strings.HasPrefix(errOut, "kwatch: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	// Each message says what is wrong and where to look.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pcap"}, "kwatch: want one capture file (or - for stdin), got 0 arguments\nRun 'kwatch pcap --help' for usage.\n"},
		{[]string{"pcap", "--no-such-flag", watchCapture}, "kwatch: unknown flag: --no-such-flag\nRun 'kwatch pcap --help' for usage.\n"},
		{[]string{"stream", "--no-such-flag"}, "kwatch: unknown flag: --no-such-flag\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"stream", "cm", "-l", "=== bad"}, "kwatch: --selector \"=== bad\": found '==', expected: !, identifier, or 'end of string'\n"},
		{[]string{"stream", "--proxy", "http://127.0.0.1:1", "cm"}, "kwatch: kubectl proxy at http://127.0.0.1:1 does not answer (connect: connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight\n"},
		// kubectl proxy's address as it prints it, without a scheme.
		{[]string{"stream", "--proxy", "127.0.0.1:1", "cm"}, "kwatch: kubectl proxy at http://127.0.0.1:1 does not answer (connect: connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight\n"},
		// --raw has no discovery first: the watch itself finds the proxy missing, once.
		{[]string{"stream", "--raw", "/api/v1/configmaps?watch=1", "--proxy", "127.0.0.1:1"}, "kwatch: kubectl proxy at http://127.0.0.1:1 does not answer (connect: connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight\n"},
		{[]string{"stream", "--proxy", "http://127.0.0.1:1/x", "cm"}, "kwatch: --proxy \"http://127.0.0.1:1/x\": want kubectl proxy's address, HOST:PORT or http://HOST:PORT (e.g. 127.0.0.1:8001)\n"},
		{[]string{"stream", "--proxy", "127.0.0.1:1", "--token", "abc", "cm"}, "kwatch: --proxy goes through kubectl proxy, which brings its own server and credentials; --token connects straight: choose one\n"},
		// Sizes are Kubernetes quantities; durations say their forms.
		{[]string{"stream", "cm", "--max-event-bytes", "lots"}, "kwatch: invalid argument \"lots\" for \"--max-event-bytes\" flag: want a size in bytes: a number or a quantity such as 64Mi, 1Gi or 500k\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"stream", "cm", "--max-event-bytes", "1.5"}, "kwatch: invalid argument \"1.5\" for \"--max-event-bytes\" flag: want a whole number of bytes, e.g. 64Mi or 1Gi\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"pcap", "--max-header-bytes", "0", watchCapture}, "kwatch: invalid argument \"0\" for \"--max-header-bytes\" flag: want a positive size, e.g. 64Mi\nRun 'kwatch pcap --help' for usage.\n"},
		{[]string{"stream", "cm", "--idle-timeout", "soon"}, "kwatch: invalid argument \"soon\" for \"--idle-timeout\" flag: want a duration such as 30s, 5m or 1h30m\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"stream", "cm", "--request-timeout", "soon"}, "kwatch: --request-timeout \"soon\": want a duration such as 10s or 1m (0: never)\n"},
		// Several resource types: types only, and no --resource-version.
		{[]string{"stream", "cm,pods/web", "--proxy", "127.0.0.1:1"}, "kwatch: \"cm,pods/web\": with several resource types, give types only (e.g. pods,configmaps), no NAME\n"},
		{[]string{"stream", "configmaps,", "--proxy", "127.0.0.1:1"}, "kwatch: \"configmaps,\": an empty resource type (a comma too many?); give types separated by commas, e.g. pods,configmaps\n"},
		{[]string{"stream", "cm", "pods", "--resource-version", "5", "--proxy", "127.0.0.1:1"}, "kwatch: --resource-version belongs to one resource type; watch several types without it\n"},
		{[]string{"-v", "-1", "version"}, "kwatch: -v takes a log level from 0 up, not -1\n"},
		{[]string{"version", "-o", "yaml"}, "kwatch: --output must be json (or left out), not \"yaml\"\n"},
		{[]string{"pcap", "--report", "out.txt", watchCapture}, "kwatch: --report writes HTML: name the file FILE.html, not \"out.txt\"\n"},
		{[]string{"pcap", "--report", "/nonexistent-dir/r.html", watchCapture}, "kwatch: --report /nonexistent-dir/r.html: the directory /nonexistent-dir does not exist\n"},
		{[]string{"pcap", "--report", "/tmp", watchCapture}, "kwatch: --report writes HTML: name the file FILE.html, not \"/tmp\"\n"},
	} {
		_, errOut, _ := run(t, nil, nil, tc.args...)
		if !strings.HasSuffix(errOut, tc.want) {
			t.Errorf("%v: stderr %q, want it to end with %q", tc.args, errOut, tc.want)
		}
	}
}

func TestPortFilter(t *testing.T) {
	out, errOut, code := run(t, nil, nil, "pcap", "--port", "9999", watchCapture)
	if code != ExitNothing || strings.Contains(out, "ADDED") {
		t.Errorf("--port 9999 should hide the :8001 watch; exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "summary: 20 packets · 0 TCP connections") {
		t.Errorf("summary: %s", out)
	}
	// A port that matches nothing says which ports the capture has.
	if want := "kwatch: no TCP packet has port 9999; the capture's TCP ports (the lower of each pair): 8001 (20 packets)\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if _, errOut, _ := run(t, nil, nil, "pcap", "--port", "8001", watchCapture); errOut != "" {
		t.Errorf("--port 8001: stderr %q", errOut)
	}
}

func TestVersion(t *testing.T) {
	want := "kwatch dev\ngo: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, code := run(t, nil, nil, args...)
		if code != ExitOK || out != want { // a test binary records no commit
			t.Errorf("kwatch %s: exit %d, %q, want %q", args[0], code, out, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	out, _, code := run(t, nil, nil, "completion", "bash")
	if code != ExitOK || !strings.Contains(out, "__start_kwatch") {
		t.Errorf("exit %d; bash completion script missing", code)
	}
}

func TestPcapDiff(t *testing.T) {
	out, _, code := run(t, nil, nil, "pcap", "--diff", watchCapture)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"                     + data.patch: \"one\"\n",
		"                     ~ data.patch: \"one\" → \"two\"\n                     + metadata.labels: {\"k8s-app\":\"kube-dns\"}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--diff output lacks %q:\n%s", want, out)
		}
	}
	js, _, _ := run(t, nil, nil, "pcap", "--diff", "-o", "json", watchCapture)
	if !strings.Contains(js, `"diff":{"data":{"patch":"two"},"metadata":{"labels":{"k8s-app":"kube-dns"}}}`) {
		t.Errorf("JSON lacks the merge patch")
	}
}

// TestProfile: --profile writes a profile pprof can read (gzip'd protobuf)
// even when the command ends with an exit code of its own; an unknown
// profile name is a usage error.
func TestProfile(t *testing.T) {
	for _, name := range []string{"cpu", "heap", "goroutine"} {
		file := filepath.Join(t.TempDir(), name+".pprof")
		_, errOut, code := run(t, nil, nil, "pcap", "--profile", name, "--profile-output", file, "../testdata/pcap/gen-fin-no-last-chunk.pcap")
		data, err := os.ReadFile(file)
		if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("--profile %s (exit %d, %q): %s is not a gzip'd profile (%v)", name, code, errOut, file, err)
		}
	}
	_, errOut, code := run(t, nil, nil, "pcap", "--profile", "wall", watchCapture)
	if code != ExitUsage || !strings.Contains(errOut, `--profile "wall": want one of`) {
		t.Errorf("--profile wall: exit %d, stderr %q", code, errOut)
	}
}

// TestProfileWriteFails: a profile that cannot be written makes a run that
// otherwise succeeded exit 2.
func TestProfileWriteFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	_, errOut, code := run(t, nil, nil, "pcap", "--profile", "heap", "--profile-output", "/dev/full", watchCapture)
	if code != ExitUsage || !strings.Contains(errOut, "--profile-output /dev/full: write /dev/full: no space left on device") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestStreamRecordSecretsRefused: a recording holds the bytes as received,
// so recording a watch of Secrets needs --show-secrets; the refusal comes
// before any connection and leaves no file.
// The path is judged as it will be sent: decoded and cleaned (a
// percent-encoded "secrets" went through, found by a hostile-input trial).
func TestStreamRecordSecretsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.pcap")
	for _, raw := range []string{"/api/v1/namespaces/default/secrets?watch=1", "/api/v1/namespaces/default/%73ecrets?watch=1",
		"/api/v1/namespaces/default/x/../secrets?watch=1", "/api/v1/secrets"} {
		_, errOut, code := run(t, nil, nil, "stream", "--raw", raw, "--proxy", "http://127.0.0.1:1", "--record", file)
		if code != ExitUsage || !strings.Contains(errOut, "pass --show-secrets as well to record a watch of Secrets") {
			t.Errorf("--raw %s: exit %d, stderr %q", raw, code, errOut)
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("--raw %s: %s was created (%v)", raw, file, err)
		}
	}
}

// TestPcapStdinShowsEventsBeforeWaiting: output is held and written in
// batches, but what was decoded is written before kwatch waits for more of
// a capture on a pipe (tcpdump -w - | kwatch pcap -).
func TestPcapStdinShowsEventsBeforeWaiting(t *testing.T) {
	data, err := os.ReadFile(watchCapture)
	if err != nil {
		t.Fatal(err)
	}
	// The first 3000 bytes hold the handshake, the request, the response
	// and the first event; the rest comes only once it has been shown.
	pr, pw := io.Pipe()
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(context.Background(), IOStreams{In: pr, Out: &out, ErrOut: io.Discard,
			Getenv: func(string) string { return "" }}, []string{"pcap", "-"})
	}()
	if _, err := pw.Write(data[:3000]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "ADDED     ConfigMap kube-system/coredns") {
		if time.Now().After(deadline) {
			t.Fatalf("the first event is not shown while kwatch waits for more input:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := pw.Write(data[3000:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-done; code != ExitOK || !strings.Contains(out.String(), "summary: ") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}

// TestPcapStdinCtrlC: Ctrl-C ends kwatch pcap - with its summary even when
// the writer keeps the pipe open (the read waiting on it is given up).
func TestPcapStdinCtrlC(t *testing.T) {
	code, out := ctrlCOnStdin(t)
	if code != ExitInterrupted || !strings.Contains(out, "summary: ") || strings.Contains(out, "problem:") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// TestPcapStdinCtrlCReport: Ctrl-C on a capture still arriving writes
// --report with what was decoded so far.
func TestPcapStdinCtrlCReport(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.html")
	if code, _ := ctrlCOnStdin(t, "--report", file); code != ExitInterrupted {
		t.Errorf("exit %d", code)
	}
	page, err := os.ReadFile(file)
	if err != nil || !bytes.Contains(page, []byte("<title>kwatch pcap -</title>")) || !bytes.Contains(page, []byte(`"ty":"ADDED"`)) {
		t.Errorf("report after Ctrl-C: %v, %d bytes", err, len(page))
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".kwatch-report-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// ctrlCOnStdin runs kwatch pcap [args] - on the start of a capture whose
// writer keeps the pipe open, cancels it (Ctrl-C) once an event is shown,
// and returns its exit status and output.
func ctrlCOnStdin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	data, err := os.ReadFile(watchCapture)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, IOStreams{In: pr, Out: &out, ErrOut: io.Discard,
			Getenv: func(string) string { return "" }}, append(append([]string{"pcap"}, args...), "-"))
	}()
	if _, err := pw.Write(data[:3000]); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "ADDED") {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		return code, out.String()
	case <-time.After(10 * time.Second):
		t.Fatal("kwatch pcap - did not end after Ctrl-C while its input stayed open")
	}
	return 0, ""
}

// TestPcapFIFOCtrlC: Ctrl-C ends kwatch pcap on a named pipe (mkfifo, or
// <(tcpdump -w - …)) whose writer keeps it open, as on stdin.
func TestPcapFIFOCtrlC(t *testing.T) {
	data, err := os.ReadFile(watchCapture)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "capture.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	writerDone, hold := make(chan struct{}), make(chan struct{})
	defer close(hold)
	go func() {
		defer close(writerDone)
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		_, _ = w.Write(data)
		<-hold // the writer lives on until the test ends
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, IOStreams{Out: &out, ErrOut: io.Discard, Getenv: func(string) string { return "" }},
			[]string{"pcap", fifo})
	}()
	for !strings.Contains(out.String(), "DELETED") {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitInterrupted || !strings.Contains(out.String(), "summary: ") {
			t.Errorf("exit %d:\n%s", code, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("kwatch pcap FIFO did not end after Ctrl-C while its writer kept it open")
	}
}

// TestPcapFIFONoWriterCtrlC: Ctrl-C while kwatch pcap waits for a writer
// to open its named pipe (mkfifo p; kwatch pcap p; tcpdump -w p later)
// ends it: 130, or 0 with --follow.
func TestPcapFIFONoWriterCtrlC(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "capture.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{{[]string{"pcap", fifo}, ExitInterrupted}, {[]string{"pcap", "--follow", fifo}, ExitOK}} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- Execute(ctx, IOStreams{Out: io.Discard, ErrOut: io.Discard, Getenv: func(string) string { return "" }}, tc.args)
		}()
		time.Sleep(100 * time.Millisecond)
		cancel()
		select {
		case code := <-done:
			if code != tc.want {
				t.Errorf("kwatch %s: exit %d, want %d", strings.Join(tc.args[:len(tc.args)-1], " "), code, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("kwatch %s FIFO did not end after Ctrl-C while no writer had opened the pipe", strings.Join(tc.args[:len(tc.args)-1], " "))
		}
	}
}

// TestPcapFollowWaitsForFile: kwatch pcap --follow started before tcpdump
// -w created its file says so and waits for it, as tail -F does; Ctrl-C
// then ends it with what was decoded (0), and Ctrl-C before the file came
// ends it at once (0, --follow's end).
func TestPcapFollowWaitsForFile(t *testing.T) {
	data, err := os.ReadFile(watchCapture)
	if err != nil {
		t.Fatal(err)
	}
	for _, create := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "later.pcap")
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Execute(ctx, IOStreams{Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" }}, []string{"pcap", "--follow", path})
		}()
		note := "kwatch: " + path + " does not exist yet; waiting for it to appear (tcpdump -w " + path + ")\n"
		for errOut.String() != note {
			time.Sleep(10 * time.Millisecond)
		}
		if create {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(out.String(), "DELETED") {
				time.Sleep(10 * time.Millisecond)
			}
		}
		cancel()
		code := <-done
		if code != ExitOK || create != strings.Contains(out.String(), "summary: 20 packets") || errOut.String() != note {
			t.Errorf("file created %v: exit %d, stderr %q, stdout:\n%s", create, code, errOut.String(), out.String())
		}
	}
}

// TestPcapCtrlCBeforeInput: Ctrl-C before stdin's first byte is an
// interruption (130), not "not a pcap file" (2).
func TestPcapCtrlCBeforeInput(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, IOStreams{In: pr, Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" }},
			[]string{"pcap", "-"})
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case code := <-done:
		if code != ExitInterrupted || errOut.String() != "" {
			t.Errorf("exit %d, stderr %q; want %d and nothing", code, errOut.String(), ExitInterrupted)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("kwatch pcap - did not end after Ctrl-C")
	}
}

// TestCompleteContexts: --context completes from the kubeconfig's contexts
// without reaching any cluster.
func TestCompleteContexts(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: prod, context: {cluster: c, user: u}}, {name: dev, context: {cluster: c, user: u}}]
current-context: dev
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := run(t, nil, nil, "__complete", "stream", "--kubeconfig", kc, "--context", "")
	if code != ExitOK || !strings.HasPrefix(out, "dev\nprod\n:4\n") {
		t.Errorf("exit %d, %q", code, out)
	}
}

// TestStreamProxyFromEnvironment: kwatch stream takes its kubectl proxy from
// $KWATCH_PROXY, says so when it does not answer, lets --proxy win over it,
// and leaves it out when a flag connects straight (flags win over the
// environment) or --proxy "" is given.
func TestStreamProxyFromEnvironment(t *testing.T) {
	env := map[string]string{"KWATCH_PROXY": "127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"from the variable", env, []string{"stream", "cm"}, ExitProblems,
			"kwatch: kubectl proxy at http://127.0.0.1:1 (from $KWATCH_PROXY) does not answer (connect: connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight\n"},
		{"--proxy wins", env, []string{"stream", "cm", "--proxy", "127.0.0.1:2"}, ExitProblems,
			"kwatch: kubectl proxy at http://127.0.0.1:2 does not answer (connect: connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight\n"},
		{"a connection flag wins", env, []string{"stream", "cm", "--server", "http://127.0.0.1:3", "--token", "t"}, ExitProblems,
			"kwatch: The connection to the server 127.0.0.1:3 was refused - did you specify the right host or port?\n"},
		{"--proxy '' leaves it out", env, []string{"stream", "cm", "--proxy", "", "--server", "http://127.0.0.1:3"}, ExitProblems,
			"kwatch: The connection to the server 127.0.0.1:3 was refused - did you specify the right host or port?\n"},
		{"a bad address", map[string]string{"KWATCH_PROXY": "http://127.0.0.1:1/x"}, []string{"stream", "cm"}, ExitUsage,
			"kwatch: $KWATCH_PROXY \"http://127.0.0.1:1/x\": want kubectl proxy's address, HOST:PORT or http://HOST:PORT (e.g. 127.0.0.1:8001)\n"},
		{"with $KUBECONFIG, the proxy", map[string]string{"KWATCH_PROXY": "127.0.0.1:1", "KUBECONFIG": "/nonexistent"}, []string{"stream", "cm"}, ExitProblems,
			"kwatch: kubectl proxy at http://127.0.0.1:1 (from $KWATCH_PROXY) does not answer (connect: connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := run(t, nil, tc.env, tc.args...)
			if code != tc.code || errOut != tc.want {
				t.Errorf("exit %d, stderr %q; want %d, %q", code, errOut, tc.code, tc.want)
			}
		})
	}
	// --help says where the proxy comes from.
	out, _, _ := run(t, nil, nil, "stream", "--help")
	if !strings.Contains(out, "$KWATCH_PROXY") {
		t.Errorf("--help does not name $KWATCH_PROXY:\n%s", out)
	}
}

// TestFlagSuggestions: an unknown flag is told the nearest flag of its
// command, as cobra tells an unknown command the nearest command; a flag
// nothing is near gets no suggestion.
func TestFlagSuggestions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stream", "--namspace", "x", "cm"}, "kwatch: unknown flag: --namspace\n\nDid you mean this?\n\t--namespace\n\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"stream", "--show-secret", "cm"}, "kwatch: unknown flag: --show-secret\n\nDid you mean this?\n\t--show-secrets\n\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"stream", "--kube=x", "cm"}, "kwatch: unknown flag: --kube\n\nDid you mean this?\n\t--kubeconfig\n\nRun 'kwatch stream --help' for usage.\n"},
		{[]string{"pcap", "--folow", watchCapture}, "kwatch: unknown flag: --folow\n\nDid you mean this?\n\t--follow\n\nRun 'kwatch pcap --help' for usage.\n"},
		{[]string{"pcap", "--profle", "cpu", watchCapture}, "kwatch: unknown flag: --profle\n\nDid you mean this?\n\t--profile\n\nRun 'kwatch pcap --help' for usage.\n"},
		{[]string{"pcap", "--no-such-flag", watchCapture}, "kwatch: unknown flag: --no-such-flag\nRun 'kwatch pcap --help' for usage.\n"},
		{[]string{"watch", "cm"}, "kwatch: unknown command \"watch\" for \"kwatch\"\n\nDid you mean this?\n\tstream\n\nRun 'kwatch --help' for usage.\n"},
		{[]string{"strem", "cm"}, "kwatch: unknown command \"strem\" for \"kwatch\"\n\nDid you mean this?\n\tstream\n\nRun 'kwatch --help' for usage.\n"},
	} {
		_, errOut, code := run(t, nil, nil, tc.args...)
		if code != ExitUsage || errOut != tc.want {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestFlagTexts: every flag's help is in one style, kwatch's (kubectl's
// connection flags included): it starts in lower case (or with an acronym:
// UID, HTTP) and has no full stop at the end.
func TestFlagTexts(t *testing.T) {
	root := NewRootCommand(IOStreams{Out: io.Discard, ErrOut: io.Discard})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		check := func(f *pflag.Flag) {
			first, _, _ := strings.Cut(f.Usage, " ")
			if first == "" || unicode.IsUpper(rune(first[0])) && strings.ToUpper(first) != first || strings.HasSuffix(f.Usage, ".") {
				t.Errorf("%s --%s: %q", c.CommandPath(), f.Name, f.Usage)
			}
		}
		c.LocalFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// nodeCapture is a node's capture of the stack on lo (hack/record-node.sh):
// kubectl get -w and kubectl's changes straight to 6443 without keys,
// kwatch stream --http2 with its key log (node.keys.log), curl through
// kubectl proxy, and long-lived connections joined after their handshakes.
const (
	nodeCapture = "../testdata/captures/node-lo.pcap"
	nodeKeys    = "../testdata/captures/node.keys.log"
)

// TestPcapNodeCapture: the connections that cannot be decrypted are one
// line, not a problem each, and do not make the run exit 1; filters pick
// one client out; a run that decodes nothing exits 3.
func TestPcapNodeCapture(t *testing.T) {
	const hidden = "not decrypted: 7 TLS connections, 48287 bytes, not shown (4 with no key in the key logs; 3 others: begun before the capture, or a suite kwatch does not decrypt): give kwatch their clients' key logs (--tls-keylog, SSLKEYLOGFILE; start the capture before they connect) to decode them, or --show-undecrypted to list each and why\n" +
		"summary: 257 packets · 10 TCP connections · 2 TLS decrypted (2 TLS 1.3 TLS_AES_128_GCM_SHA256) · 7 not decoded: 7 TLS · 2 watches · 7 events: 2 ADDED, 2 MODIFIED, 2 DELETED, 1 BOOKMARK · 3 chunks · 4 DATA frames · 0 problems, 0 warnings\n"
	out, errOut, code := run(t, nil, nil, "pcap", "--tls-keylog", nodeKeys, nodeCapture)
	if code != ExitOK || errOut != "" || !strings.HasSuffix(out, hidden) || strings.Contains(out, "no TLS key") || strings.Contains(out, "encrypted, not decoded") {
		t.Errorf("exit %d, stderr %q:\n%s", code, errOut, out)
	}
	// JSON: the same count in the summary record, no record of theirs.
	out, _, code = run(t, nil, nil, "pcap", "-o", "json", "--tls-keylog", nodeKeys, nodeCapture)
	if code != ExitOK || !strings.Contains(out, `"notDecrypted":{"connections":7,"bytes":48287,"noKey":4}`) || strings.Contains(out, `"kind":"tls"`) {
		t.Errorf("-o json: exit %d:\n%s", code, out)
	}
	// --show-undecrypted: each connection with its note, and a problem
	// for each of the 4 a key log was given for.
	out, _, code = run(t, nil, nil, "pcap", "--show-undecrypted", "--tls-keylog", nodeKeys, nodeCapture)
	if code != ExitProblems || strings.Count(out, "problem: "+nodeCapture+": packet") != 4 || strings.Count(out, "encrypted, not decoded") != 7 ||
		!strings.Contains(out, " · 4 problems, 0 warnings\n") || strings.Contains(out, "not decrypted:") {
		t.Errorf("--show-undecrypted: exit %d:\n%s", code, out)
	}
	// One client: kwatch stream's watch connection, by its port.
	out, _, code = run(t, nil, nil, "pcap", "--tls-keylog", nodeKeys, "--client", "127.0.0.1:54972", "--server", "127.0.0.1:6443", nodeCapture)
	if code != ExitOK || !strings.HasPrefix(out, "#1 127.0.0.1:54972 -> 127.0.0.1:6443 · client kwatch/dev\n") ||
		!strings.HasSuffix(out, "summary: 257 packets · 1 TCP connection (9 left out by the filters) · 1 TLS decrypted (1 TLS 1.3 TLS_AES_128_GCM_SHA256) · 1 watch · 4 events: 1 ADDED, 1 MODIFIED, 1 DELETED, 1 BOOKMARK · 4 DATA frames · 0 problems, 0 warnings\n") {
		t.Errorf("--client: exit %d:\n%s", code, out)
	}
	// Without the key log, port 6443 decodes nothing: exit 3, said.
	_, errOut, code = run(t, nil, nil, "pcap", "--server", "127.0.0.1:6443", nodeCapture)
	if want := "kwatch: nothing decoded: the capture's 9 TCP connections carried no HTTP kwatch could read (9 not decoded: 9 TLS); give the TLS clients' key logs with --tls-keylog or SSLKEYLOGFILE (start the capture before they connect)\n"; code != ExitNothing || errOut != want {
		t.Errorf("no keys: exit %d, stderr %q, want %q", code, errOut, want)
	}
	// A client that is not in the capture: exit 3, with what is.
	_, errOut, code = run(t, nil, nil, "pcap", "--client", "10.1.1.1", nodeCapture)
	if want := "kwatch: no TCP connection matches --client 10.1.1.1; the capture's servers: 127.0.0.1:6443 (241 packets), 127.0.0.1:8001 (16 packets); its clients: 127.0.0.1 (257 packets)\n"; code != ExitNothing || errOut != want {
		t.Errorf("--client 10.1.1.1: exit %d, stderr %q, want %q", code, errOut, want)
	}
	for _, bad := range []string{"10.1.1", "10.1.1.1:0", "host:6443"} {
		if _, errOut, code := run(t, nil, nil, "pcap", "--client", bad, nodeCapture); code != ExitUsage || !strings.Contains(errOut, "--client: ") {
			t.Errorf("--client %s: exit %d, stderr %q", bad, code, errOut)
		}
	}
}

// TestPcapFilters: --user-agent, --resource and -n keep a capture's
// watches by their requests (node-lo.pcap: curl's watch through kubectl
// proxy, kwatch stream's straight to 6443), the summary counts the others,
// a filter that keeps none exits 3 saying what it left out, and a filter
// that cannot match is refused.
func TestPcapFilters(t *testing.T) {
	out, errOut, code := run(t, nil, nil, "pcap", "--tls-keylog", nodeKeys, "--user-agent", "CURL", nodeCapture)
	if code != ExitOK || errOut != "" || !strings.Contains(out, "#3 > GET /api/v1/namespaces/nodecap/configmaps?watch=1 HTTP/1.1\n") || strings.Contains(out, "kwatch/dev") ||
		!strings.Contains(out, " · 1 watch (1 left out by the filters) · 3 events: 1 ADDED, 1 MODIFIED, 1 DELETED · 3 chunks · ") {
		t.Errorf("--user-agent CURL: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	recs, _, _ := pcapJSON(t, "--tls-keylog", nodeKeys, "--resource", "configmaps", "-n", "nodecap", "--all-http", nodeCapture)
	for _, r := range recs {
		if r["record"] == "request" && !strings.HasPrefix(fmt.Sprint(r["target"]), "/api/v1/namespaces/nodecap/configmaps?") {
			t.Errorf("--resource configmaps -n nodecap --all-http: a request of %v", r["target"])
		}
		if r["record"] == "summary" && fmt.Sprint(r["leftOut"]) != "map[connections:0 exchanges:3 notKnown:0 problems:0 watches:0]" {
			t.Errorf("--resource configmaps -n nodecap --all-http: leftOut %v", r["leftOut"])
		}
	}
	_, errOut, code = run(t, nil, nil, "pcap", "--tls-keylog", nodeKeys, "--resource", "configmaps", "-n", "other", nodeCapture)
	if want := "kwatch: no watch matches --resource configmaps -n other: 2 watches left out; their resources: configmaps (2); their namespaces: nodecap (2)\n"; code != ExitNothing || errOut != want {
		t.Errorf("-n other: exit %d, stderr %q, want %q", code, errOut, want)
	}
	for _, tc := range []struct{ flag, value, want string }{
		{"--client", "kube-controller-manager", "kwatch: --client kube-controller-manager: not ADDR or ADDR:PORT; a client process's name works with kwatch attach, which knows each connection's processes\n"},
		{"--resource", "ConfigMap", `kwatch: --resource "ConfigMap": a resource is named in lowercase`},
		{"--resource", "configmap", `kwatch: --resource "configmap": resources are plural, as the API's paths name them: configmaps` + "\n"},
		{"-n", "Demo_1", `kwatch: -n: "Demo_1" is not a namespace name: `},
	} {
		_, errOut, code := run(t, nil, nil, "pcap", tc.flag, tc.value, nodeCapture)
		if code != ExitUsage || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("%s %s: exit %d, stderr %q, want %q", tc.flag, tc.value, code, errOut, tc.want)
		}
	}
}

// TestPcapTopFilters: --top's table is after the filters: kwatch pcap
// --follow --top --user-agent curl on node-lo.pcap has a row for curl's
// watch alone (3 events), none for kwatch stream's watch that the filter
// left out, and the summary after the table counts that one as left out.
func TestPcapTopFilters(t *testing.T) {
	s := startKwatch(t, "pcap", "--follow", "--top", "--tls-keylog", nodeKeys, "--user-agent", "curl", nodeCapture)
	if line := waitTopRow(t, s, "configmaps", "nodecap", 3); !strings.Contains(line, "curl/7.88.1") {
		t.Errorf("the row does not name curl: %q", line)
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d:\n%s", code, s.errOut.String())
	}
	out := s.out.String()
	if strings.Contains(out, "kwatch/dev") || !strings.Contains(out, " 1 watch · ") || strings.Contains(out, " 2 watches · ") {
		t.Errorf("a table shows the watch --user-agent curl leaves out:\n%s", out)
	}
	if !strings.Contains(out, " · 1 watch (1 left out by the filters) · 3 events: 1 ADDED, 1 MODIFIED, 1 DELETED · ") {
		t.Errorf("the summary does not count the watch left out:\n%s", out)
	}
}

// waitTopRow waits until the first table kwatch --top printed (stdout a
// pipe: plain tables) has the row of resource in ns with events events,
// and returns the row; it fails after 30 s.
func waitTopRow(t *testing.T, s *session, resource, ns string, events int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if line, _, n := topRow(strings.Split(s.out.String(), "\n\n")[0], resource, ns); n == events {
			return line
		}
		if time.Now().After(deadline) {
			t.Fatalf("no table with the row of %s in %s with %d events:\n%s\nstderr:\n%s", resource, ns, events, s.out.String(), s.errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPcapTopProblems: the problems found while --top's table stood in for
// the lines are listed at the run's end, before the health lines and the
// summary that counts them: kwatch pcap --follow --top on a capture with a
// corrupt gzip member between two events (gen-gzip-corrupt-member.pcap).
func TestPcapTopProblems(t *testing.T) {
	s := startKwatch(t, "pcap", "--follow", "--top", "../testdata/pcap/gen-gzip-corrupt-member.pcap")
	waitTopRow(t, s, "configmaps", "default", 3)
	if code := s.stop(t); code != ExitProblems {
		t.Errorf("exit %d, want 1:\n%s", code, s.errOut.String())
	}
	out := s.out.String()
	var end []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "problem: ") || strings.Contains(l, "warning: ") || strings.HasPrefix(l, "health #1") || strings.HasPrefix(l, "summary:") {
			end = append(end, l)
		}
	}
	want := []string{
		"2026-01-01T00:00:00.406000Z problem: ../testdata/pcap/gen-gzip-corrupt-member.pcap: packet 7: 10.0.0.1:40052 -> 10.0.0.2:8001: server data offset 928: content coding corrupt",
		"health #1: 3 events: 1 ADDED, 2 MODIFIED",
		"summary: 11 packets · 1 TCP connection · 1 watch · 3 events: 1 ADDED, 2 MODIFIED · 3 chunks · 1 problem, 0 warnings",
	}
	if len(end) != len(want) {
		t.Fatalf("the run's end has %d problem, health and summary lines, want %d:\n%s", len(end), len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(end[i], w) {
			t.Errorf("line %d of the end: %q, want it to begin %q", i+1, end[i], w)
		}
	}
}

// TestPcapBookmarks: on a capture of curl's watch with two bookmarks
// (bookmarks-lo.pcap), the readable output says them in one line with
// their count, --bookmarks shows each on its own line, -o json has a
// record of each, and the end, health and summary lines count both in
// every case.
func TestPcapBookmarks(t *testing.T) {
	const capture = "../testdata/pcap/bookmarks-lo.pcap"
	counted := []string{
		"end: last-chunk · 4 events: 1 ADDED, 1 MODIFIED, 2 BOOKMARK · 4 chunks",
		"health #1: 4 events: 1 ADDED, 1 MODIFIED, 2 BOOKMARK · ",
		" · 2 bookmarks, every 1.224s ",
		"summary: 18 packets · 1 TCP connection · 1 watch · 4 events: 1 ADDED, 1 MODIFIED, 2 BOOKMARK · ",
	}
	folded, _, code := run(t, nil, nil, "pcap", capture)
	if code != ExitOK || !strings.Contains(folded, "#1   2 BOOKMARKs rv 103 over 1.224s (events 3-4)\n") || strings.Contains(folded, " BOOKMARK  rv ") {
		t.Errorf("folded: exit %d:\n%s", code, folded)
	}
	each, _, code := run(t, nil, nil, "pcap", "--bookmarks", capture)
	if code != ExitOK || strings.Count(each, " BOOKMARK  rv 103  chunk 0x69 = 105 bytes\n") != 2 || strings.Contains(each, "BOOKMARKs") {
		t.Errorf("--bookmarks: exit %d:\n%s", code, each)
	}
	for _, want := range counted {
		if !strings.Contains(folded, want) || !strings.Contains(each, want) {
			t.Errorf("folded or --bookmarks lacks %q:\nfolded:\n%s\n--bookmarks:\n%s", want, folded, each)
		}
	}
	recs, _, _ := pcapJSON(t, capture)
	bookmarks, health := 0, ""
	for _, r := range recs {
		switch {
		case r["record"] == "event" && r["type"] == "BOOKMARK":
			bookmarks++
		case r["record"] == "health" && r["scope"] == "watch":
			health = fmt.Sprint(r["bookmarks"].(map[string]any)["count"])
		}
	}
	if bookmarks != 2 || health != "2" {
		t.Errorf("-o json: %d BOOKMARK events, health's bookmarks count %s; want 2 of each", bookmarks, health)
	}
}
