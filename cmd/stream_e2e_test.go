package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/http2/hpack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/internal/testutil"
)

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// session runs kwatch in the background until stop is called.
type session struct {
	out, errOut *syncBuffer
	cancel      context.CancelFunc
	done        chan int
}

func startKwatch(t *testing.T, args ...string) *session {
	t.Helper()
	return startKwatchEnv(t, nil, args...)
}

// startKwatchEnv is startKwatch with the environment env.
func startKwatchEnv(t *testing.T, env map[string]string, args ...string) *session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{out: &syncBuffer{}, errOut: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	streams := IOStreams{In: strings.NewReader(""), Out: s.out, ErrOut: s.errOut, Getenv: func(k string) string { return env[k] }}
	go func() { s.done <- Execute(ctx, streams, args) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *session) stop(t *testing.T) int {
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("kwatch did not stop within 20s after cancel; output:\n%s", s.out.String())
	}
	return -1
}

// records parses the JSON Lines written so far.
func (s *session) records(t *testing.T) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.out.String()))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasSuffix(line, []byte("}")) {
			continue // a line still being written
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("bad JSON line %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// pcapJSON runs kwatch pcap -o json with args and returns its records, and
// its stdout and stderr; a run that exits other than 0 or 1 (problems)
// fails the test.
func pcapJSON(t *testing.T, args ...string) (recs []map[string]any, out, errOut string) {
	t.Helper()
	out, errOut, code := run(t, nil, nil, append([]string{"pcap", "-o", "json"}, args...)...)
	if code != ExitOK && code != ExitProblems {
		t.Fatalf("kwatch pcap %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	rec := &session{out: &syncBuffer{}}
	_, _ = rec.out.Write([]byte(out))
	return rec.records(t), out, errOut
}

// waitFor polls until cond holds on the records, or fails after d.
func (s *session) waitFor(t *testing.T, d time.Duration, what string, cond func([]map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		recs := s.records(t)
		if cond(recs) {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; stdout:\n%s\nstderr:\n%s", d, what, s.out.String(), s.errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitForText polls the pretty output until it holds text, or fails
// after 30 s; it returns the output.
func (s *session) waitForText(t *testing.T, what, text string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := s.out.String()
		if strings.Contains(out, text) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; stdout:\n%s\nstderr:\n%s", what, out, s.errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func events(recs []map[string]any, name string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["record"] == "event" && (name == "" || r["name"] == name) {
			out = append(out, r)
		}
	}
	return out
}

func ofRecord(recs []map[string]any, kind string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["record"] == kind {
			out = append(out, r)
		}
	}
	return out
}

// checkChunks asserts that every event arrived in chunks whose size line is
// the hex of their size, and that they carried all of the event's bytes.
func checkChunks(t *testing.T, ev map[string]any) {
	t.Helper()
	chunks, _ := ev["chunks"].([]any)
	if len(chunks) == 0 {
		t.Fatalf("event without chunks: %v", ev)
	}
	var carried float64
	for _, c := range chunks {
		c := c.(map[string]any)
		size := int64(c["size"].(float64))
		line := c["sizeLine"].(string)
		got, err := strconv.ParseInt(line, 16, 64)
		if err != nil || got != size || size <= 0 {
			t.Errorf("chunk size line %q does not match size %d", line, size)
		}
		carried += c["bytes"].(float64)
	}
	if carried != ev["length"].(float64) {
		t.Errorf("chunks carried %v bytes of a %v-byte event", carried, ev["length"])
	}
}

// writeAndCheck creates, patches and deletes a ConfigMap and checks kwatch
// showed ADDED, MODIFIED, DELETED with the server's resourceVersions.
func writeAndCheck(t *testing.T, env *e2e.Env, s *session, ns, name string) {
	t.Helper()
	cs := env.Clientset(t)
	ctx := context.Background()
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool {
		return len(ofRecord(r, "response")) > 0
	})
	created, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patched, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"data":{"k":"v2"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "ADDED, MODIFIED, DELETED of "+name, func(r []map[string]any) bool {
		return len(events(r, name)) >= 3
	})
	evs := events(recs, name)
	want := []struct{ typ, rv string }{{"ADDED", created.ResourceVersion}, {"MODIFIED", patched.ResourceVersion}, {"DELETED", ""}}
	for i, w := range want {
		ev := evs[i]
		if ev["type"] != w.typ || ev["namespace"] != ns {
			t.Errorf("event %d: %v %v/%v, want %s %s/%s", i, ev["type"], ev["namespace"], ev["name"], w.typ, ns, name)
		}
		if w.rv != "" && ev["resourceVersion"] != w.rv {
			t.Errorf("event %d: resourceVersion %v, want %s", i, ev["resourceVersion"], w.rv)
		}
		checkChunks(t, ev)
	}
}

// TestStreamProxyEnvironment: with $KWATCH_PROXY and no flag, kwatch
// stream goes through that proxy and its first line says so; with
// --kubeconfig (a flag: it wins) it goes straight, naming the context.
func TestStreamProxyEnvironment(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	vars := map[string]string{"KWATCH_PROXY": strings.TrimPrefix(env.ProxyURL, "http://")}
	s := startKwatchEnv(t, vars, "stream", "configmaps", "-n", ns)
	first, _, _ := strings.Cut(s.waitForText(t, "the first line", "\n"), "\n")
	if !strings.HasSuffix(first, " · HTTP/1.1 through kubectl proxy "+env.ProxyURL+" (from $KWATCH_PROXY)") || !strings.Contains(first, "WATCH 1 configmaps in namespace "+ns) {
		t.Errorf("first line %q", first)
	}
	s.stop(t)
	s = startKwatchEnv(t, vars, "stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig)
	first, _, _ = strings.Cut(s.waitForText(t, "the first line", "\n"), "\n")
	if !regexp.MustCompile(` · HTTP/1\.1 over TLS straight to https://\S+ \(context \S+; decrypted bytes decoded\)$`).MatchString(first) {
		t.Errorf("first line %q", first)
	}
}

func TestStreamThroughProxy(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "-o", "json")
	writeAndCheck(t, env, s, ns, "through-proxy")
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d after cancel; stderr %s", code, s.errOut.String())
	}
	recs := s.records(t)
	if w := ofRecord(recs, "watch"); len(w) == 0 || !strings.Contains(w[0]["transport"].(string), "kubectl proxy") {
		t.Errorf("watch record does not say it went through kubectl proxy: %v", w)
	}
	sum := ofRecord(recs, "summary")
	if len(sum) != 1 || sum[0]["watchesOpened"] != 1.0 || sum[0]["connections"].(float64) < 1 {
		t.Errorf("summary: %v", sum)
	}
	if _, ok := sum[0]["packets"]; ok {
		t.Errorf("a live summary counts packets it never read: %v", sum[0])
	}
}

func TestStreamDirectTLS(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	s := startKwatch(t, "stream", "cm", "-n", ns, "--kubeconfig", env.Kubeconfig, "-o", "json")
	writeAndCheck(t, env, s, ns, "direct")
	recs := s.records(t)
	// It names the server and the context whose credentials it uses.
	raw, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	server := raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster].Server
	want := "HTTP/1.1 over TLS straight to " + server + " (context " + raw.CurrentContext + "; decrypted bytes decoded)"
	if w := ofRecord(recs, "watch"); len(w) == 0 || w[0]["transport"] != want {
		t.Errorf("watch record's transport is not %q: %v", want, w)
	}
	for _, r := range ofRecord(recs, "request") {
		h, _ := json.Marshal(r["header"])
		if strings.Contains(string(h), "Bearer ") && !strings.Contains(string(h), "Bearer REDACTED") {
			t.Errorf("credentials printed: %s", h)
		}
	}
}

func TestStreamProtobuf(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "--proto", "-o", "json")
	writeAndCheck(t, env, s, ns, "proto")
	for _, ev := range events(s.records(t), "proto") {
		if ev["format"] != "protobuf" {
			t.Errorf("event format %v, want protobuf", ev["format"])
		}
	}
}

// TestStreamBookmarksAndResume asks the server to end each watch after 5 s:
// kwatch must show the bookmarks the server sends (not only the
// initial-events-end one), the end of the watch, and watch again from the
// last resourceVersion it saw.
func TestStreamBookmarksAndResume(t *testing.T) {
	env := e2e.Cluster(t)
	ns, other := env.Namespace(t), env.Namespace(t)
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "--timeout", "5s", "-o", "json")
	s.waitFor(t, 30*time.Second, "the first watch", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	// The watch cache sends a watch a bookmark (2 s before its timeout)
	// only when the cache's resourceVersion is past the last event the
	// watch got: write ConfigMaps the watch does not see, in another
	// namespace, until one came (a watch's bookmark may be missed when
	// the write comes late; the next watch then gets one).
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cms := env.Clientset(t).CoreV1().ConfigMaps(other)
		for i := 0; ; i++ {
			_, _ = cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tick-%d", i)}}, metav1.CreateOptions{})
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	periodic := func(r []map[string]any) int {
		n := 0
		for _, ev := range events(r, "") {
			if ev["type"] == "BOOKMARK" && ev["initialEventsEnd"] != true {
				n++
			}
		}
		return n
	}
	recs := s.waitFor(t, 60*time.Second, "a second watch and a bookmark other than initial-events-end", func(r []map[string]any) bool {
		return len(ofRecord(r, "watch")) >= 2 && periodic(r) > 0
	})
	watches := ofRecord(recs, "watch")
	if !strings.HasPrefix(watches[1]["reason"].(string), "resume") {
		t.Errorf("second watch reason %q, want a resume", watches[1]["reason"])
	}
	ends := ofRecord(recs, "end")
	if len(ends) == 0 || ends[0]["how"] != "last-chunk" {
		t.Errorf("first watch should end with the last-chunk: %v", ends)
	}
	if !strings.Contains(watches[1]["path"].(string), "timeoutSeconds=5") {
		t.Errorf("resume path %v", watches[1]["path"])
	}
}

// TestStreamRelistOn410 makes a watch fall behind for good: kubectl proxy
// goes away, objects are created, changed and deleted, and etcd is compacted
// past the last resourceVersion kwatch saw. PodTemplates have no watch cache
// in the test stack (--watch-cache-sizes=podtemplates#0), so the resumed
// watch reaches etcd and gets 410 Gone; kwatch must list again and say what
// changed while it was not watching.
func TestStreamRelistOn410(t *testing.T) {
	for _, mode := range []string{"list", "watch-list"} {
		t.Run(mode, func(t *testing.T) { relistOn410(t, mode) })
	}
}

func relistOn410(t *testing.T, mode string) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	pt := func(name, v string) *corev1.PodTemplate {
		return &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"v": v}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}
	}
	for _, n := range []string{"keep", "change", "remove"} {
		if _, err := cs.CoreV1().PodTemplates(ns).Create(ctx, pt(n, "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := newProxy(t, env)
	reportFile := filepath.Join(t.TempDir(), "relist.html")
	s := startKwatch(t, "stream", "podtemplates", "-n", ns, "--list-mode", mode, "--proxy", p.url, "-o", "json", "--report", reportFile)
	// The state is known once the first watch is answered after its LIST,
	// or, for a watch-list, once its initial-events-end bookmark came:
	// stopping the proxy before would make kwatch get the state again,
	// with no resourceVersion to be told 410 about.
	s.waitFor(t, 30*time.Second, "the first watch and the current state", func(r []map[string]any) bool {
		if mode == "list" {
			return len(ofRecord(r, "response")) > 0
		}
		for _, ev := range ofRecord(r, "event") {
			if ev["initialEventsEnd"] == true {
				return true
			}
		}
		return false
	})

	p.stop()
	if _, err := cs.CoreV1().PodTemplates(ns).Create(ctx, pt("new", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	changed, err := cs.CoreV1().PodTemplates(ns).Update(ctx, pt("change", "2"), metav1.UpdateOptions{})
	if err != nil {
		// Update needs the current resourceVersion.
		cur, gerr := cs.CoreV1().PodTemplates(ns).Get(ctx, "change", metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		cur.Labels["v"] = "2"
		if changed, err = cs.CoreV1().PodTemplates(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CoreV1().PodTemplates(ns).Delete(ctx, "remove", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	compactEtcd(t, env.EtcdURL, changed.ResourceVersion)
	p.start()

	// The report draws the re-list on the watch that follows it: with
	// --list-mode list, one opened after the relist record.
	recs := s.waitFor(t, 60*time.Second, "a re-list after 410 and the watch after it", func(r []map[string]any) bool {
		i := slices.IndexFunc(r, func(rec map[string]any) bool { return rec["record"] == "relist" })
		return i >= 0 && (mode == "watch-list" || slices.ContainsFunc(r[i:], func(rec map[string]any) bool {
			return rec["record"] == "response" && rec["watch"] == true
		}))
	})
	gone := false
	for _, r := range recs {
		if (r["record"] == "response" && r["statusCode"] == 410.0) || (r["record"] == "event" && r["type"] == "ERROR") {
			gone = true
		}
	}
	if !gone {
		t.Errorf("no 410 response or ERROR event shown")
	}
	if mode == "list" {
		lists := ofRecord(recs, "list")
		if len(lists) < 2 || lists[1]["reason"] != "re-list after 410 Gone" || lists[1]["items"] != 3.0 {
			t.Errorf("lists: %v", lists)
		}
	} else {
		var reasons []any
		for _, w := range ofRecord(recs, "watch") {
			reasons = append(reasons, w["reason"])
		}
		if len(ofRecord(recs, "list")) != 0 || !slices.Contains(reasons, any("re-list after 410 Gone (watch-list)")) {
			t.Errorf("watch-list: %d LIST records, watch reasons %v", len(ofRecord(recs, "list")), reasons)
		}
	}
	rl := ofRecord(recs, "relist")[0]
	want := map[string]string{"appeared": ns + "/new", "disappeared": ns + "/remove", "changed": ns + "/change"}
	for field, name := range want {
		got, _ := rl[field].([]any)
		if len(got) != 1 || got[0] != name {
			t.Errorf("relist %s = %v, want [%s]", field, got, name)
		}
	}
	if rl["unchanged"] != 1.0 {
		t.Errorf("relist unchanged = %v, want 1", rl["unchanged"])
	}
	s.stop(t) // as Ctrl-C: the report is written now
	checkRelistReport(t, reportFile, s.records(t))
}

// checkRelistReport opens the --report of a session with a 410 re-list in
// chromium: a lane per watch and a mark per event as in the JSON Lines, the
// 410 on the timeline (an ERROR 410 mark, or a watch answered 410), the
// re-list drawn as a note and as a link to the watch that followed, and no
// script error.
func checkRelistReport(t *testing.T, file string, recs []map[string]any) {
	t.Helper()
	watches := 0
	for _, r := range ofRecord(recs, "request") {
		if r["watch"] == true {
			watches++
		}
	}
	events := len(ofRecord(recs, "event"))
	ctx, errs := testutil.Browser(t)
	testutil.Do(t, ctx, chromedp.Navigate("file://"+file), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	lanes := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline g.lane").length`))
	marks := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline rect.mark").length`))
	if lanes != watches || marks != events {
		t.Errorf("report: %d lanes and %d marks; the JSON Lines have %d watches and %d events", lanes, marks, watches, events)
	}
	gone := testutil.Get(t, ctx, chromedp.Evaluate[bool](
		`document.querySelectorAll("#timeline rect.mark.expired").length > 0 || kwatchReport.data.lanes.some(l => l.status === 410)`))
	relists := testutil.Get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#timeline .note[data-kind="relist"]').length`))
	links := testutil.Get(t, ctx, chromedp.Evaluate[[]string](`kwatchReport.data.lanes.filter(l => l.link).map(l => l.link)`))
	if !gone || relists == 0 || !slices.ContainsFunc(links, func(l string) bool { return strings.Contains(l, "|re-list|") }) {
		t.Errorf("report: 410 shown %v, %d re-list notes drawn, links %v", gone, relists, links)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("script errors: %s", strings.Join(e, "\n"))
	}
}

// compactEtcd compacts etcd's history up to revision rv through etcd's
// JSON gateway (POST /v3/kv/compaction), so that older resourceVersions are
// gone.
func compactEtcd(t *testing.T, etcdURL, rv string) {
	t.Helper()
	body := strings.NewReader(`{"revision":"` + rv + `","physical":true}`)
	resp, err := http.Post(strings.TrimRight(etcdURL, "/")+"/v3/kv/compaction", "application/json", body)
	if err != nil {
		t.Fatalf("compacting etcd: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("compacting etcd: %s: %s", resp.Status, msg)
	}
}

// testProxy is a kubectl proxy of the test's own, on a free port.
type testProxy struct {
	t       *testing.T
	kubectl string
	kc      string
	port    int
	url     string
	cmd     *exec.Cmd
}

func newProxy(t *testing.T, env *e2e.Env) *testProxy {
	p := &testProxy{t: t, kubectl: env.Kubectl, kc: env.Kubeconfig, port: freePort(t)}
	p.url = fmt.Sprintf("http://127.0.0.1:%d", p.port)
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *testProxy) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.kubectl, "--kubeconfig", p.kc, "proxy", "--address=127.0.0.1", fmt.Sprintf("--port=%d", p.port))
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port)); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("kubectl proxy did not listen on %d", p.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *testProxy) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// TestStreamProxyRestart kills kubectl proxy in the middle of a watch,
// writes while it is down, starts it again, and checks that kwatch resumed
// from the last resourceVersion and lost no event.
func TestStreamProxyRestart(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	p := newProxy(t, env)
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", p.url, "-o", "json")
	writeAndCheck(t, env, s, ns, "before")

	p.stop()
	cs := env.Clientset(t)
	var rvs []string
	for i := 0; i < 5; i++ {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("outage-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, cm.ResourceVersion)
	}
	s.waitFor(t, 60*time.Second, "a retry while the proxy is down", func(r []map[string]any) bool { return len(ofRecord(r, "retry")) > 0 })
	p.start()

	recs := s.waitFor(t, 60*time.Second, "the 5 ConfigMaps created while the proxy was down", func(r []map[string]any) bool {
		n := 0
		for _, ev := range events(r, "") {
			if strings.HasPrefix(fmt.Sprint(ev["name"]), "outage-") && ev["type"] == "ADDED" {
				n++
			}
		}
		return n >= 5
	})
	got := map[string]bool{}
	for _, ev := range events(recs, "") {
		if strings.HasPrefix(fmt.Sprint(ev["name"]), "outage-") {
			got[fmt.Sprint(ev["resourceVersion"])] = true
		}
	}
	for _, rv := range rvs {
		if !got[rv] {
			t.Errorf("the ADDED event at resourceVersion %s (made while the proxy was down) is missing", rv)
		}
	}
	if len(ofRecord(recs, "retry")) == 0 {
		t.Errorf("no retry shown while the proxy was down")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestStreamHTTP2 keeps HTTP/2 on the direct connection: no chunks exist,
// events come with their sizes only, and the watch line says so.
func TestStreamHTTP2(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	// client-go's HTTP/2 health check, read by kwatch as by client-go: a
	// PING after 1 s without a frame (30 s by default).
	t.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "1")
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--http2", "-o", "json")
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	cm, err := env.Clientset(t).CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "h2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "the ADDED event", func(r []map[string]any) bool { return len(events(r, "h2")) > 0 })
	ev := events(recs, "h2")[0]
	frames, _ := ev["frames"].([]any)
	if ev["resourceVersion"] != cm.ResourceVersion || len(ev["chunks"].([]any)) != 0 || ev["length"].(float64) < 100 || len(frames) == 0 {
		t.Fatalf("HTTP/2 event: %v", ev)
	}
	// The DATA frame of the decrypted connection, on the watch's stream.
	f := frames[0].(map[string]any)
	if f["stream"].(float64) < 1 || f["length"].(float64) <= 0 || f["bytes"].(float64) != ev["length"].(float64) {
		t.Errorf("HTTP/2 event's DATA frame %v (event length %v)", f, ev["length"])
	}
	// A 200 KB object: many DATA frames, none over the 16 384 bytes the
	// client allows (SETTINGS_MAX_FRAME_SIZE), carrying all of its bytes.
	if _, err := env.Clientset(t).CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "h2-big"}, Data: map[string]string{"blob": hexBlob(200 << 10)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs = s.waitFor(t, 30*time.Second, "the 200 KB object's event", func(r []map[string]any) bool { return len(events(r, "h2-big")) > 0 })
	bigEv := events(recs, "h2-big")[0]
	bigFrames, _ := bigEv["frames"].([]any)
	var carried float64
	for _, f := range bigFrames {
		f := f.(map[string]any)
		if f["length"].(float64) > 16384 {
			t.Errorf("DATA frame of %v bytes, over the client's SETTINGS_MAX_FRAME_SIZE 16384", f["length"])
		}
		carried += f["bytes"].(float64)
	}
	if len(bigFrames) < 2 || carried != bigEv["length"].(float64) {
		t.Errorf("200 KB event in %d DATA frames carrying %v of its %v bytes", len(bigFrames), carried, bigEv["length"])
	}
	recs = s.waitFor(t, 30*time.Second, "a PING after 1 s idle, answered", func(r []map[string]any) bool {
		for _, n := range ofRecord(r, "note") {
			if strings.HasPrefix(n["message"].(string), "PING from the client answered after ") {
				return true
			}
		}
		return false
	})
	var settings bool
	for _, n := range ofRecord(recs, "note") {
		settings = settings || strings.HasPrefix(n["message"].(string), "SETTINGS from the server: ") && strings.Contains(n["message"].(string), "MAX_CONCURRENT_STREAMS=100")
	}
	if !settings {
		t.Errorf("no note with the API server's SETTINGS (MAX_CONCURRENT_STREAMS=100): %v", ofRecord(recs, "note"))
	}
	w := ofRecord(recs, "watch")[0]
	if !strings.Contains(w["transport"].(string), "HTTP/2") {
		t.Errorf("transport %v", w["transport"])
	}
	if resp := ofRecord(recs, "response")[0]; resp["proto"] != "HTTP/2.0" || !strings.HasSuffix(resp["connection"].(string), ":6443") {
		t.Errorf("response %v", resp)
	}
}

// TestStreamAPIServerRestart restarts kube-apiserver in the middle of a
// watch (SIGKILL, then hack/cluster-up.sh starts it again). It runs its own stack (other ports, its own run folder) so that the
// other end-to-end tests keep theirs. kwatch must retry while the server is
// down and then resume (or re-list) without losing the event written after.
func TestStreamAPIServerRestart(t *testing.T) {
	e2e.Cluster(t) // skips under -short; builds the binaries if needed
	root, err := e2e.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := append(os.Environ(), "KWATCH_CLUSTER_DIR="+dir,
		fmt.Sprintf("KWATCH_ETCD_CLIENT_PORT=%d", freePort(t)), fmt.Sprintf("KWATCH_ETCD_PEER_PORT=%d", freePort(t)),
		fmt.Sprintf("KWATCH_APISERVER_PORT=%d", freePort(t)), fmt.Sprintf("KWATCH_PROXY_PORT=%d", freePort(t)),
		fmt.Sprintf("KWATCH_CONTROLLER_MANAGER_PORT=%d", freePort(t)), fmt.Sprintf("KWATCH_SCHEDULER_PORT=%d", freePort(t)),
		// The shared stack's nodes stay the shared stack's: this one is a
		// control plane alone.
		"KWATCH_NODES=none")
	script := func(name string) string {
		cmd := exec.Command("bash", filepath.Join(root, "hack", name))
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, stderr.String())
		}
		return string(out)
	}
	lines := script("cluster-up.sh")
	t.Cleanup(func() { script("cluster-down.sh") })
	var kubeconfig, proxyURL string
	for _, l := range strings.Split(lines, "\n") {
		if v, ok := strings.CutPrefix(l, "KUBECONFIG="); ok {
			kubeconfig = v
		}
		if v, ok := strings.CutPrefix(l, "PROXY_URL="); ok {
			proxyURL = v
		}
	}
	own := &e2e.Env{Kubeconfig: kubeconfig, ProxyURL: proxyURL}
	cs := own.Clientset(t)
	create := func(name string) string {
		var cm *corev1.ConfigMap
		var err error
		for i := 0; i < 100; i++ { // the restarted server may need a moment
			cm, err = cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err == nil {
				return cm.ResourceVersion
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("creating %s: %v", name, err)
		return ""
	}

	s := startKwatch(t, "stream", "configmaps", "-n", "default", "--proxy", proxyURL, "-o", "json")
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	rv1 := create("before-restart")
	s.waitFor(t, 30*time.Second, "before-restart", func(r []map[string]any) bool { return len(events(r, "before-restart")) > 0 })

	pid, err := os.ReadFile(filepath.Join(dir, "kube-apiserver.pid"))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL, a crash: with SIGTERM kube-apiserver drains long-running
	// requests for up to 60 s before it goes.
	if out, err := exec.Command("kill", "-KILL", strings.TrimSpace(string(pid))).CombinedOutput(); err != nil {
		t.Fatalf("kill: %v %s", err, out)
	}
	t0 := time.Now()
	s.waitFor(t, 60*time.Second, "a retry while kube-apiserver is down", func(r []map[string]any) bool { return len(ofRecord(r, "retry")) > 0 })
	t.Logf("first retry %s after the kill", time.Since(t0))
	script("cluster-up.sh") // restarts kube-apiserver and the proxy
	t.Logf("restarted %s after the kill", time.Since(t0))
	rv2 := create("after-restart")
	// The restarted server's watch cache starts at the current
	// resourceVersion, so the resumed watch may get 410 Gone: then the
	// object must show up in the re-list's "appeared" instead of as an
	// event. Either way it is not lost.
	inRelist := func(r []map[string]any) bool {
		for _, rl := range ofRecord(r, "relist") {
			appeared, _ := rl["appeared"].([]any) // null when nothing appeared
			for _, n := range appeared {
				if n == "default/after-restart" {
					return true
				}
			}
		}
		return false
	}
	recs := s.waitFor(t, 60*time.Second, "after-restart as an event or in a re-list", func(r []map[string]any) bool {
		return len(events(r, "after-restart")) > 0 || inRelist(r)
	})
	if evs := events(recs, "after-restart"); len(evs) > 0 && (evs[0]["type"] != "ADDED" || evs[0]["resourceVersion"] != rv2) {
		t.Errorf("after restart: %v, want ADDED at %s", evs[0], rv2)
	}
	if ev := events(recs, "before-restart")[0]; ev["resourceVersion"] != rv1 {
		t.Errorf("before restart: %v, want rv %s", ev, rv1)
	}
	if n := len(ofRecord(recs, "watch")); n < 2 {
		t.Errorf("%d watches, want a resumed one", n)
	}
}

// TestStreamRecordRoundTrip records a live session on the real stack with
// --record and decodes the file with kwatch pcap: every event, with its
// chunks, must come out as it was shown live.
func TestStreamRecordRoundTrip(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	file := filepath.Join(t.TempDir(), "session.pcap")
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--record", file, "-o", "json")
	writeAndCheck(t, env, s, ns, "recorded")
	if code := s.stop(t); code != ExitOK {
		t.Fatalf("exit %d: %s", code, s.errOut.String())
	}
	key := func(ev map[string]any) string {
		var sizes []string
		for _, c := range ev["chunks"].([]any) {
			c := c.(map[string]any)
			sizes = append(sizes, fmt.Sprintf("%v/%v@%v", c["size"], c["sizeLine"], c["offset"]))
		}
		// A pcap keeps microseconds.
		tm, err := time.Parse(time.RFC3339Nano, ev["time"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%v %v %v %v %v", ev["type"], ev["name"], ev["resourceVersion"], tm.Truncate(time.Microsecond), sizes)
	}
	rec := sameAsRecording(t, s, file, key)
	// Each watch ends in the recording as it ended live.
	ends := func(recs []map[string]any) string {
		var hows []string
		for _, e := range ofRecord(recs, "end") {
			if e["request"] != true {
				hows = append(hows, fmt.Sprint(e["how"]))
			}
		}
		return strings.Join(hows, ", ")
	}
	if l, r := ends(s.records(t)), ends(rec.records(t)); l != r || l != "closed by the client" {
		t.Errorf("watch ends: live %q, from the recording %q; want both \"closed by the client\"", l, r)
	}
	// The recording is meant to be handed around: the bearer token kwatch
	// sent is masked in it, the scheme word kept; and it is its owner's.
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("recording mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	token := regexp.MustCompile(`token: (\S+)`).FindSubmatch(kc)
	if token == nil {
		t.Fatalf("no token in %s", env.Kubeconfig)
	}
	if bytes.Contains(data, token[1]) {
		t.Errorf("the recording holds the bearer token")
	}
	if !bytes.Contains(data, []byte("Authorization: Bearer "+strings.Repeat("*", len(token[1])))) {
		t.Errorf("the recording lacks the masked Authorization field")
	}
}

// TestStreamDiffFromList: with --diff, the first MODIFIED of an object that
// existed before the watch is diffed against the version the current state
// gave (the watch-list's initial ADDED), and a Secret's values never show
// in a diff.
func TestStreamDiffFromList(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"},
		Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "--diff", "-o", "json")
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "before", types.MergePatchType, []byte(`{"data":{"k":"v2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	modified := func(r []map[string]any) []map[string]any {
		var out []map[string]any
		for _, e := range events(r, "before") {
			if e["type"] == "MODIFIED" {
				out = append(out, e)
			}
		}
		return out
	}
	recs := s.waitFor(t, 30*time.Second, "the MODIFIED event", func(r []map[string]any) bool { return len(modified(r)) > 0 })
	d, _ := json.Marshal(modified(recs)[0]["diff"])
	if string(d) != `{"data":{"k":"v2"}}` {
		t.Errorf("diff %s, want {\"data\":{\"k\":\"v2\"}}", d)
	}
}

// TestStreamRecordSecrets: recording a watch of Secrets is refused without
// --show-secrets, alone or among several types, before anything is
// written or said: one line of error that says what to do, no warning that
// a file holds keys, no file; with --show-secrets it is recorded.
func TestStreamRecordSecrets(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	file := filepath.Join(t.TempDir(), "secrets.pcap")
	ng := filepath.Join(t.TempDir(), "secrets.pcapng")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"secrets", "--record", file}, "kwatch: " + errRecordSecrets.Error() + "\n"},
		{[]string{"secrets", "--record", ng}, "kwatch: " + errRecordSecrets.Error() + "\n"},
		{[]string{"configmaps,secret,pods", "--record", ng}, "kwatch: secret: --record writes the watch's bytes as received, Secret data included; " +
			"pass --show-secrets as well to record a watch of Secrets, or record the others alone (configmaps,pods)\n"},
		{[]string{"cm", "secrets", "--record", file, "--http2"}, "kwatch: secrets: --record writes the watch's bytes as received, Secret data included; " +
			"pass --show-secrets as well to record a watch of Secrets, or record the others alone (cm)\n"},
	} {
		out, errOut, code := run(t, nil, nil, append([]string{"stream", "-n", ns, "--kubeconfig", env.Kubeconfig}, tc.args...)...)
		if code != ExitUsage || errOut != tc.want || out != "" {
			t.Errorf("%v without --show-secrets: exit %d, stdout %q, stderr %q, want %q", tc.args, code, out, errOut, tc.want)
		}
		for _, f := range []string{file, ng} {
			if _, err := os.Stat(f); !os.IsNotExist(err) {
				t.Errorf("%v: %s left behind (%v)", tc.args, f, err)
			}
		}
	}
	s := startKwatch(t, "stream", "secrets", "-n", ns, "--kubeconfig", env.Kubeconfig, "--record", file, "--show-secrets", "-o", "json")
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	if code := s.stop(t); code != ExitOK {
		t.Errorf("with --show-secrets: exit %d, %s", code, s.errOut.String())
	}
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Errorf("with --show-secrets: no recording (%v)", err)
	}
}

// TestStreamDiffSecret: --diff on a Secret says that a value changed (its
// redaction tag changed) and never shows the value.
func TestStreamDiffSecret(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	s := startKwatch(t, "stream", "secrets", "-n", ns, "--proxy", env.ProxyURL, "--diff", "-o", "json")
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pw"},
		StringData: map[string]string{"password": "hunter2", "user": "alice"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Patch(ctx, "pw", types.MergePatchType, []byte(`{"stringData":{"password":"newpass"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "the MODIFIED event", func(r []map[string]any) bool { return len(events(r, "pw")) > 1 })
	d, _ := json.Marshal(events(recs, "pw")[1]["diff"])
	if !regexp.MustCompile(`^\{"data":\{"password":"REDACTED[0-9a-f]{8}"\}\}$`).Match(d) {
		t.Errorf("diff %s, want the password's new redaction tag only", d)
	}
	out := s.out.String()
	for _, v := range []string{"hunter2", "newpass", "aHVudGVyMg", "bmV3cGFzcw"} {
		if strings.Contains(out, v) {
			t.Errorf("output holds %q", v)
		}
	}
}

// TestStreamCompletion: namespaces and watchable resources complete from
// the cluster, as with kubectl.
func TestStreamCompletion(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	out, _, code := run(t, nil, nil, "__complete", "stream", "--proxy", env.ProxyURL, "-n", "")
	if code != ExitOK || !strings.Contains(out, "\n"+ns+"\n") || !strings.Contains(out, "kube-system\n") {
		t.Errorf("namespaces: exit %d, %q", code, out)
	}
	out, _, code = run(t, nil, nil, "__complete", "stream", "--proxy", env.ProxyURL, "")
	for _, want := range []string{"configmaps\n", "deployments.apps\n", "podtemplates\n"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("resources: exit %d, lacks %q in %q", code, want, out)
		}
	}
	if strings.Contains(out, "/") {
		t.Errorf("resources: a subresource in %q", out)
	}
	// A comma-separated list: the types not in it yet, after it, with no
	// space so that another comma can follow.
	out, _, code = run(t, nil, nil, "__complete", "stream", "--proxy", env.ProxyURL, "pods,con")
	if want := "pods,configmaps\npods,controllerrevisions.apps\n:6\n"; code != ExitOK || !strings.HasPrefix(out, want) {
		t.Errorf("pods,con: exit %d, %q, want %q", code, out, want)
	}
	out, _, _ = run(t, nil, nil, "__complete", "stream", "--proxy", env.ProxyURL, "configmaps,pods,configm")
	if !strings.HasPrefix(out, ":6\n") {
		t.Errorf("configmaps,pods,configm: %q, want no type listed twice", out)
	}
	// RESOURCE/NAME: the names of the objects in -n's namespace, as
	// kubectl get cm/<TAB>; metadata only, so Secrets' names too.
	cs := env.Clientset(t)
	for _, name := range []string{"comp-b", "comp-a", "other"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "comp-s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ arg, want string }{
		{"cm/", "cm/comp-a\ncm/comp-b\ncm/other\n:4\n"},
		{"configmaps/comp", "configmaps/comp-a\nconfigmaps/comp-b\n:4\n"},
		{"secrets/", "secrets/comp-s\n:4\n"},
	} {
		out, _, code := run(t, nil, nil, "__complete", "stream", "--proxy", env.ProxyURL, "-n", ns, tc.arg)
		if code != ExitOK || !strings.HasPrefix(out, tc.want) {
			t.Errorf("%s: exit %d, %q, want %q", tc.arg, code, out, tc.want)
		}
	}
	// Straight from the kubeconfig too.
	out, _, _ = run(t, nil, nil, "__complete", "stream", "--kubeconfig", env.Kubeconfig, "-n", ns, "cm/comp-a")
	if !strings.HasPrefix(out, "cm/comp-a\n:4\n") {
		t.Errorf("cm/comp-a with --kubeconfig: %q", out)
	}
}

// TestStreamCBOR watches as CBOR (the stack's kube-apiserver runs with
// CBORServingAndStorage, see hack/cluster-up.sh): the server answers
// application/cbor-seq, and every event is decoded with its chunks.
func TestStreamCBOR(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "--cbor", "-o", "json")
	writeAndCheck(t, env, s, ns, "cbor")
	recs := s.records(t)
	if r := ofRecord(recs, "response"); len(r) == 0 || r[0]["contentType"] != "application/cbor-seq" || r[0]["format"] != "cbor" {
		t.Errorf("response %v, want application/cbor-seq decoded as cbor (is the stack's CBOR gate on? make cluster-up)", r)
	}
	if p := ofRecord(recs, "problem"); len(p) > 0 {
		t.Errorf("problems: %v", p)
	}
	for _, ev := range events(recs, "cbor") {
		if ev["format"] != "cbor" {
			t.Errorf("event format %v, want cbor", ev["format"])
		}
	}
}

// hexBlob returns n bytes of deterministic hex digits that gzip shrinks
// only to about half (a watch-list arrives gzip'd).
func hexBlob(n int) string {
	rng := rand.New(rand.NewSource(1))
	b := make([]byte, n)
	for i := range b {
		b[i] = "0123456789abcdef"[rng.Intn(16)]
	}
	return string(b)
}

// TestStreamRecordHTTP2: kwatch stream --http2 --record writes the HTTP/2
// frames as received; kwatch pcap decodes the same events with the same
// DATA frames, and the bearer token is in the file neither as sent nor
// Huffman-coded (HPACK, as Go sends it): its octets were masked.
func TestStreamRecordHTTP2(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	file := filepath.Join(t.TempDir(), "session.pcap")
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--http2", "--record", file, "-o", "json")
	writeAndCheckFrames(t, env, s, ns, "recorded-h2")
	if code := s.stop(t); code != ExitOK {
		t.Fatalf("exit %d: %s", code, s.errOut.String())
	}
	key := func(ev map[string]any) string {
		return fmt.Sprintf("%v %v %v %v", ev["type"], ev["name"], ev["resourceVersion"], ev["frames"])
	}
	sameAsRecording(t, s, file, key)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	token := env.RESTConfig(t).BearerToken
	if token == "" {
		t.Fatal("the stack's kubeconfig has no bearer token")
	}
	for _, form := range [][]byte{[]byte(token), hpack.AppendHuffmanString(nil, "Bearer "+token), hpack.AppendHuffmanString(nil, token)} {
		if bytes.Contains(data, form[:len(form)-1]) { // the last octet may carry the next symbol's bits
			t.Fatalf("the recording holds the bearer token (%d-byte form)", len(form))
		}
	}
}

// writeAndCheckFrames is writeAndCheck for HTTP/2: the events carry DATA
// frames, not chunks.
func writeAndCheckFrames(t *testing.T, env *e2e.Env, s *session, ns, name string) {
	t.Helper()
	cs := env.Clientset(t)
	ctx := context.Background()
	s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"v2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "ADDED, MODIFIED, DELETED of "+name, func(r []map[string]any) bool { return len(events(r, name)) >= 3 })
	for _, ev := range events(recs, name) {
		if f, _ := ev["frames"].([]any); len(f) == 0 {
			t.Errorf("event without DATA frames: %v", ev)
		}
	}
}

// TestStreamSeveralResources: kwatch stream configmaps,podtemplates runs
// one list-watch per type, on connections of their own numbered as one
// run, its watches numbered as one run too, and sums them in one summary.
func TestStreamSeveralResources(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	s := startKwatch(t, "stream", "configmaps,podtemplates", "-n", ns, "--proxy", env.ProxyURL, "-o", "json")
	s.waitFor(t, 30*time.Second, "both watches to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) >= 2 })
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "both-cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PodTemplates(ns).Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "both-pt"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "both objects' ADDED events", func(r []map[string]any) bool {
		return len(events(r, "both-cm")) > 0 && len(events(r, "both-pt")) > 0
	})
	cm, pt := events(recs, "both-cm")[0], events(recs, "both-pt")[0]
	if cm["kind"] != "ConfigMap" || pt["kind"] != "PodTemplate" || cm["connection"] == pt["connection"] {
		t.Errorf("events %v %v / %v %v: want a ConfigMap and a PodTemplate on two connections", cm["kind"], cm["connection"], pt["kind"], pt["connection"])
	}
	ids := map[any]bool{}
	for _, c := range ofRecord(recs, "connection") {
		if ids[c["id"]] {
			t.Errorf("connection id %v given twice", c["id"])
		}
		ids[c["id"]] = true
	}
	numbers := map[any]bool{}
	for _, w := range ofRecord(recs, "watch") {
		if numbers[w["number"]] {
			t.Errorf("watch number %v given twice", w["number"])
		}
		numbers[w["number"]] = true
	}
	if code := s.stop(t); code != ExitOK {
		t.Fatalf("exit %d: %s", code, s.errOut.String())
	}
	sum := ofRecord(s.records(t), "summary")
	if len(sum) != 1 || sum[0]["watchesOpened"] != 2.0 {
		t.Errorf("summary %v, want one with 2 watches opened", sum)
	}
}

// TestStreamSeveralResourcesHTTP2: over HTTP/2 the watches of several types
// share one connection, as client-go's informers do: each is a stream of it.
func TestStreamSeveralResourcesHTTP2(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	s := startKwatch(t, "stream", "configmaps", "podtemplates", "-n", ns, "--kubeconfig", env.Kubeconfig, "--http2", "-o", "json")
	s.waitFor(t, 30*time.Second, "both watches to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) >= 2 })
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "h2-cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().PodTemplates(ns).Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "h2-pt"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "both objects' ADDED events", func(r []map[string]any) bool {
		return len(events(r, "h2-cm")) > 0 && len(events(r, "h2-pt")) > 0
	})
	cm, pt := events(recs, "h2-cm")[0], events(recs, "h2-pt")[0]
	if cm["connection"] != pt["connection"] || cm["exchange"] == pt["exchange"] || len(ofRecord(recs, "connection")) != 1 {
		t.Errorf("ConfigMap on %v stream %v, PodTemplate on %v stream %v, %d connections: want two streams of one connection",
			cm["connection"], cm["exchange"], pt["connection"], pt["exchange"], len(ofRecord(recs, "connection")))
	}
	// Each stream's request names the watch it opened (WATCH n): the
	// watch record of that number asked for its path.
	paths := map[float64]string{}
	for _, w := range ofRecord(recs, "watch") {
		paths[w["number"].(float64)] = w["path"].(string)
	}
	seen := map[float64]bool{}
	for _, r := range ofRecord(recs, "request") {
		n, _ := r["watchNumber"].(float64)
		if p, _, _ := strings.Cut(paths[n], "?"); n == 0 || seen[n] || !strings.HasPrefix(r["target"].(string), p+"?") {
			t.Errorf("stream %v asks for %v, said to open watch %v (%q)", r["exchange"], r["target"], n, paths[n])
		}
		seen[n] = true
	}
	if len(seen) != 2 {
		t.Errorf("%d watch requests name their watch, want 2", len(seen))
	}
}

// sameAsRecording checks that kwatch pcap decodes from the recording file
// the events (at least 3) that the live session s showed, as key renders
// each, and returns the recording's records as a session.
func sameAsRecording(t *testing.T, s *session, file string, key func(map[string]any) string) *session {
	t.Helper()
	var live []string
	for _, ev := range events(s.records(t), "") {
		live = append(live, key(ev))
	}
	out, errOut, code := run(t, nil, nil, "pcap", "-o", "json", file)
	if code != ExitOK {
		t.Fatalf("kwatch pcap on the recording: exit %d, %s", code, errOut)
	}
	rec := &session{out: &syncBuffer{}}
	_, _ = rec.out.Write([]byte(out))
	var decoded []string
	for _, ev := range events(rec.records(t), "") {
		decoded = append(decoded, key(ev))
	}
	if len(live) < 3 || strings.Join(live, "\n") != strings.Join(decoded, "\n") {
		t.Errorf("live:\n%s\nfrom the recording:\n%s", strings.Join(live, "\n"), strings.Join(decoded, "\n"))
	}
	return rec
}
