package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeExample is one of README's examples that run on a shipped capture:
// the command's arguments after "kwatch", the lines README shows of its
// output (stdout and stderr together, as a terminal shows them), and
// whether README cut the times off them.
type readmeExample struct {
	line    int // line of the command, counted over README and docs/*.md
	args    []string
	shown   []string
	noTimes bool
}

// readmeExamples finds README's (and docs/'s) examples of kwatch pcap on a file under
// testdata/: a ```sh block of one `go run . pcap …` line followed by its
// output block, or a block of `$ kwatch pcap …` lines each followed by
// output lines ("…" lines stand for lines left out). A command with a pipe
// is not one.
func readmeExamples(t *testing.T) []readmeExample {
	t.Helper()
	var lines []string
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{"../README.md"}, docs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(string(b), "\n")...)
	}
	var out []readmeExample
	var cur *readmeExample
	inBlock, pendingRun := false, -1
	var pendingArgs []string
	flush := func() {
		if cur != nil && len(cur.shown) > 0 {
			out = append(out, *cur)
		}
		cur = nil
	}
	command := func(i int, cmd string) *readmeExample {
		cmd, note, _ := strings.Cut(cmd, "  (lines cut:")
		if strings.ContainsAny(cmd, "|<>;&") {
			return nil
		}
		args := strings.Fields(cmd)
		if len(args) < 2 || args[0] != "pcap" || !strings.HasPrefix(args[len(args)-1], "testdata/") {
			return nil
		}
		return &readmeExample{line: i + 1, args: args, noTimes: strings.Contains(note, "no times")}
	}
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "```"):
			if inBlock {
				flush()
				inBlock = false
				continue
			}
			inBlock = true
			if pendingRun >= 0 && l == "```" {
				cur = command(pendingRun, strings.Join(pendingArgs, " "))
			}
			pendingRun = -1
			if l == "```sh" {
				// A lone `go run . pcap FILE`: its output is the
				// next block.
				if j := i + 2; j < len(lines) && lines[j] == "```" {
					if rest, ok := strings.CutPrefix(lines[i+1], "go run . "); ok {
						pendingRun, pendingArgs = i+1, []string{rest}
					}
				}
			}
		case !inBlock:
		case strings.HasPrefix(l, "$ kwatch "):
			flush()
			cur = command(i, strings.TrimPrefix(l, "$ kwatch "))
		case cur != nil && l != "…":
			cur.shown = append(cur.shown, l)
		}
	}
	return out
}

// timePrefix is a line's leading RFC 3339 time, as kwatch prints on a pipe.
var timePrefix = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z `)

// TestREADMEExamples runs README's examples on shipped captures and checks
// that every line README shows is, byte for byte, a line of the real
// output, in the same order (README leaves lines out, marked "…" or said
// in the text; "(lines cut: no times)" drops the leading times).
func TestREADMEExamples(t *testing.T) {
	examples := readmeExamples(t)
	if len(examples) < 6 {
		t.Fatalf("only %d README examples found on shipped captures", len(examples))
	}
	// The commands run where README's reader runs them: at the
	// repository's root (the output names the files as given).
	t.Chdir("..")
	for _, ex := range examples {
		out, errOut, _ := run(t, nil, nil, ex.args...)
		var real []string
		for _, l := range strings.Split(out+errOut, "\n") {
			if ex.noTimes {
				l = timePrefix.ReplaceAllString(l, "")
			}
			real = append(real, l)
		}
		at := 0
		for _, want := range ex.shown {
			i := at
			for i < len(real) && real[i] != want {
				i++
			}
			if i == len(real) {
				t.Errorf("README line %d, kwatch %s: the line\n%s\nis not in the output (after its line %d):\n%s",
					ex.line, strings.Join(ex.args, " "), want, at, strings.Join(real, "\n"))
				break
			}
			at = i + 1
		}
	}
	t.Logf("%d examples", len(examples))
}
