package cmd

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kwatch/kwatch/internal/e2e"
)

// tmuxSession is kwatch running in a real terminal: a detached tmux
// session on a server of the test's own, read with capture-pane and driven
// with send-keys.
type tmuxSession struct {
	t      *testing.T
	socket string
}

// startTmux runs command in a tmux session of width × height cells; the
// pane stays when the command ends (its last line says its exit status).
func startTmux(t *testing.T, width, height int, command string) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is not installed (Debian's tmux; .ci/run installs it)")
	}
	s := &tmuxSession{t: t, socket: e2e.Unique("kwatch-test-")}
	cmd := exec.Command("tmux", "-L", s.socket, "-f", "/dev/null", "new-session", "-d", "-s", "top",
		"-x", fmt.Sprint(width), "-y", fmt.Sprint(height), command+`; echo "kwatch exited $?"; sleep 600`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	return s
}

// screen is what the pane shows now; with history, its scrollback too.
func (s *tmuxSession) screen(history bool) string {
	args := []string{"-L", s.socket, "capture-pane", "-p", "-t", "top"}
	if history {
		args = append(args, "-S", "-")
	}
	out, err := exec.Command("tmux", args...).Output()
	if err != nil {
		s.t.Fatalf("tmux capture-pane: %v", err)
	}
	return string(out)
}

func (s *tmuxSession) keys(keys ...string) {
	args := append([]string{"-L", s.socket, "send-keys", "-t", "top"}, keys...)
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		s.t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
}

// waitScreen polls the pane until ok says yes of it, or fails after
// timeout; it returns the screen ok took.
func (s *tmuxSession) waitScreen(what string, timeout time.Duration, ok func(string) bool) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sc := s.screen(false)
		if ok(sc) {
			return sc
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s; the terminal shows:\n%s", what, s.screen(true))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// topRow finds the row of the watch of resource in namespace ns on a
// screen of kwatch's table: its line, its index among the lines, and its
// event count (the table's selectors column is empty for these watches).
func topRow(screen, resource, ns string) (line string, index, events int) {
	re := regexp.MustCompile(`\s` + regexp.QuoteMeta(resource) + `\s+` + regexp.QuoteMeta(ns) + `\s+(\d+)\s`)
	for i, l := range strings.Split(screen, "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			fmt.Sscan(m[1], &events)
			return l, i, events
		}
	}
	return "", -1, -1
}

// TestAttachTopInTmux runs kwatch attach kube-apiserver --top in a real
// terminal (tmux): kubectl watches the Secrets, then the ConfigMaps of a
// namespace of the test's, and a burst of 30 ConfigMap changes follows.
// The ConfigMaps watch's row names its client (kubectl, its command and
// its process), its resource and its 30 events; the events key sorts it
// above the Secrets watch, the watch key (first seen first) below; q ends
// the table, and the usual health lines and summary follow on the
// restored screen.
func TestAttachTopInTmux(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	bin := filepath.Join(t.TempDir(), "kwatch")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Wide and tall enough that no column is cut and every watch of the
	// stack's API server has its row. kwatch's notices go to a file
	// (on the terminal they would be said under the table), to see when
	// it has attached.
	errLog := filepath.Join(t.TempDir(), "stderr")
	tm := startTmux(t, 400, 300, bin+" attach kube-apiserver --top 2>"+errLog)
	tm.waitScreen("the table", 60*time.Second, func(s string) bool { return strings.Contains(s, "kwatch top · ") })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(errLog); strings.Contains(string(b), "attached to kube-apiserver (pid") {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(errLog)
			t.Fatalf("kwatch did not say it attached:\n%s", b)
		}
	}
	kubectl := filepath.Join(filepath.Dir(env.Kubeconfig), "bin", "kubectl")
	watch := func(resource string) *exec.Cmd {
		k := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "-n", ns, "get", resource, "-w", "--output-watch-events")
		if err := k.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Process.Kill(); _ = k.Wait() })
		tm.waitScreen(resource+" watch's row", 60*time.Second, func(s string) bool { _, i, _ := topRow(s, resource, ns); return i >= 0 })
		return k
	}
	watch("secrets")
	k := watch("configmaps")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := env.Clientset(t).CoreV1().ConfigMaps(ns)
	for i := range 10 {
		name := fmt.Sprintf("burst-%d", i)
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"n":"1"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	screen := tm.waitScreen("30 events on the ConfigMaps watch's row", 60*time.Second, func(s string) bool {
		_, _, n := topRow(s, "configmaps", ns)
		return n == 30
	})
	line, _, _ := topRow(screen, "configmaps", ns)
	client := regexp.MustCompile(`kubectl/v[0-9.]+ … get \(pid ` + fmt.Sprint(k.Process.Pid) + `\)`)
	if !client.MatchString(line) {
		t.Errorf("the ConfigMaps watch's row does not name kubectl get (pid %d):\n%s", k.Process.Pid, line)
	}

	order := func(key string) (cm, secrets int) {
		tm.keys(key)
		sc := tm.waitScreen("the table sorted by key "+key, 10*time.Second, func(s string) bool {
			return strings.Contains(s, "sorted by "+map[string]string{"e": "events", "w": "watch"}[key]+" ·")
		})
		_, cm, _ = topRow(sc, "configmaps", ns)
		_, secrets, _ = topRow(sc, "secrets", ns)
		return cm, secrets
	}
	if cm, secrets := order("e"); cm < 0 || secrets < 0 || cm > secrets {
		t.Errorf("sorted by events, the ConfigMaps watch (line %d) is not above the Secrets watch (line %d)", cm, secrets)
	}
	if cm, secrets := order("w"); cm < 0 || secrets < 0 || cm < secrets {
		t.Errorf("sorted by watch, the ConfigMaps watch (line %d) is not below the Secrets watch (line %d), which began first", cm, secrets)
	}

	tm.keys("q")
	end := tm.waitScreen("kwatch's end", 60*time.Second, func(s string) bool { return strings.Contains(s, "kwatch exited ") })
	if !strings.Contains(end, "kwatch exited 0") {
		t.Errorf("kwatch's exit status is not 0:\n%s", end)
	}
	if strings.Contains(end, "kwatch top · ") || strings.Contains(end, "q quit") {
		t.Errorf("the table is still on the screen after q:\n%s", end)
	}
	all := tm.screen(true)
	if !regexp.MustCompile(`(?m)^summary: \d+ packets · \d+ TCP connections · .* watches · `).MatchString(all) || !strings.Contains(all, "\nhealth ") {
		t.Errorf("no health lines and summary after the table:\n%s", all)
	}
}

// TestPcapTopPlain runs kwatch pcap -i lo --top with its output on a pipe:
// a plain table every second, with no escape sequence, whose row of
// curl's watch through kubectl proxy names curl, configmaps, the
// namespace and its 3 events; the summary follows at the end.
func TestPcapTopPlain(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	u, err := url.Parse(env.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	s := startKwatch(t, "pcap", "-i", "lo", "--port", u.Port(), "--top")
	waitText(t, "the capture", s.errOut, "kwatch: capturing TCP port")
	var out syncBuffer
	c := exec.Command("curl", "-s", "-N", env.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps?watch=1")
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	// The watch's row shows once the capture holds it (the capture may
	// open after curl's connection: poke the proxy until a row shows).
	deadline := time.Now().Add(60 * time.Second)
	for _, i, _ := topRow(s.out.String(), "configmaps", ns); i < 0; _, i, _ = topRow(s.out.String(), "configmaps", ns) {
		if time.Now().After(deadline) {
			t.Fatalf("no row of curl's watch:\n%s", s.out.String())
		}
		if resp, err := http.Get(env.ProxyURL + "/healthz"); err == nil {
			resp.Body.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	churn(t, env, ns, "plain")
	for len(curlEvents(t, out.String())) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("curl got %v", curlEvents(t, out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		tables := strings.Split(s.out.String(), "\n\n")
		last := tables[max(len(tables)-2, 0)]
		if line, _, n := topRow(last, "configmaps", ns); n == 3 {
			if !strings.Contains(line, "curl/") {
				t.Errorf("the row does not name curl: %q", line)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no row with 3 events:\n%s", s.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d", code)
	}
	got := s.out.String()
	if strings.Contains(got, "\x1b") {
		t.Errorf("escapes on a pipe:\n%q", got)
	}
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \d+ watch(es)? · `).MatchString(got) || !regexp.MustCompile(`(?m)^summary: `).MatchString(got) ||
		strings.Contains(got, " ADDED ") {
		t.Errorf("want timed tables, then the summary, and no event line:\n%s", got)
	}
}
