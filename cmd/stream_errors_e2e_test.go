package cmd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"

	"github.com/kwatch/kwatch/internal/e2e"
)

// TestStreamProtoFallbackCRD: --proto on a custom resource (served as JSON
// only) is answered 406 by the real API server; kwatch says so, watches as
// JSON at once, and shows the custom resource's events.
func TestStreamProtoFallbackCRD(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	crd := env.CreateCRD(t)
	s := startKwatch(t, "stream", crd.Plural, "-n", ns, "--proto", "--proxy", env.ProxyURL, "-o", "json")
	s.waitFor(t, 30*time.Second, "the JSON watch to open", func(r []map[string]any) bool {
		return len(ofRecord(r, "response")) >= 2
	})
	dc, err := dynamic.NewForConfig(env.RESTConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": crd.Group + "/v1", "kind": crd.Kind,
		"metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"size": 3}}}
	if _, err := dc.Resource(crd.GVR).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := s.waitFor(t, 30*time.Second, "the custom resource's ADDED", func(r []map[string]any) bool {
		return len(events(r, "w1")) > 0
	})
	resp := ofRecord(recs, "response")
	if resp[0]["statusCode"] != 406.0 || resp[1]["statusCode"] != 200.0 || resp[1]["format"] != "json" {
		t.Errorf("responses %v, %v; want 406, then 200 json", resp[0]["statusCode"], resp[1])
	}
	var warned bool
	for _, p := range ofRecord(recs, "problem") {
		warned = warned || (p["problem"] == "protobuf not served" && p["severity"] == "warning")
	}
	if !warned {
		t.Errorf("no \"protobuf not served\" warning: %v", ofRecord(recs, "problem"))
	}
	if ev := events(recs, "w1")[0]; ev["type"] != "ADDED" || ev["kind"] != crd.Kind {
		t.Errorf("event %v", ev)
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d: %s", code, s.errOut.String())
	}
}

// TestStreamBadResourceVersion: the real API server answers 500 to a
// resourceVersion that is not one; kwatch shows that answer, then stops
// with exit 1 and what to do, after one request.
func TestStreamBadResourceVersion(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	out, errOut, code := run(t, nil, nil, "stream", "cm", "-n", ns, "--resource-version", "abc", "--proxy", env.ProxyURL)
	if code != ExitProblems {
		t.Fatalf("exit %d, want 1; stderr %q", code, errOut)
	}
	want := `kwatch: watch /api/v1/namespaces/` + ns + `/configmaps?allowWatchBookmarks=true&resourceVersion=abc&watch=true: the API server says resourceVersion "abc" is not valid (500 Internal Server Error): --resource-version takes a version the server gave, e.g. the one on a LIST line or in an event; leave it out to list first` + "\n"
	if errOut != want {
		t.Errorf("stderr %q\nwant %q", errOut, want)
	}
	if n := strings.Count(out, "> GET "); n != 1 || !strings.Contains(out, "< HTTP/1.1 500 Internal Server Error") {
		t.Errorf("%d requests, want 1 answered 500:\n%s", n, out)
	}
	if !strings.Contains(out, "summary: 0 watches opened (1 requested)") {
		t.Errorf("summary:\n%s", out)
	}
}

// TestStreamListedObjects: the objects that exist when the watch starts are
// shown first, one line each, with the scope on the LIST and WATCH lines;
// --watch-only hides them.
func TestStreamListedObjects(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	for _, n := range []string{"one", "two"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{"app": "kw"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s := startKwatch(t, "stream", "cm", "-n", ns, "-l", "app=kw", "--list-mode", "list", "--proxy", env.ProxyURL)
	out := s.waitForText(t, "the watch to open", "< HTTP/1.1 200 OK")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`LIST configmaps in namespace ` + ns + ` -l app=kw: 2 items at resourceVersion \d+ \(\S+; initial\)\n`),
		regexp.MustCompile(`Z   listed    ConfigMap ` + ns + `/one  rv \d+\n.*Z   listed    ConfigMap ` + ns + `/two  rv \d+\n`),
		regexp.MustCompile(`WATCH 1 configmaps in namespace ` + ns + ` -l app=kw from resourceVersion \d+ · after LIST · `),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	s.stop(t)

	s = startKwatch(t, "stream", "cm", "-A", "-l", "app=kw", "--watch-only", "--proxy", env.ProxyURL, "-o", "json")
	recs := s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	if l := ofRecord(recs, "list"); len(l) != 1 || l[0]["allNamespaces"] != true || l[0]["labelSelector"] != "app=kw" {
		t.Errorf("list record %v", l)
	}
	if n := len(ofRecord(recs, "listed")); n != 0 {
		t.Errorf("--watch-only showed %d listed objects", n)
	}
	if !strings.Contains(s.out.String(), `"record":"watch"`) || !strings.Contains(s.out.String(), `"allNamespaces":true`) {
		t.Errorf("watch record without its scope:\n%s", s.out.String())
	}
}

// TestStreamKubectlFlags: kubectl's connection flags reach the API server
// straight, without a kubeconfig: --server, --token,
// --certificate-authority, and --as and --as-group impersonate (Impersonate-User, redacted as a credential, and Impersonate-Group).
func TestStreamKubectlFlags(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	kc, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) string {
		m := regexp.MustCompile(name + `: (\S+)`).FindSubmatch(kc)
		if m == nil {
			t.Fatalf("no %s in %s", name, env.Kubeconfig)
		}
		return string(m[1])
	}
	args := []string{"stream", "cm", "-n", ns, "--kubeconfig", os.DevNull, "--server", field("server"), "--token", field("token"),
		"--certificate-authority", field("certificate-authority"), "--as", "kw-someone", "--as-group", "system:masters", "-o", "json"}
	s := startKwatch(t, args...)
	recs := s.waitFor(t, 30*time.Second, "the watch to open", func(r []map[string]any) bool { return len(ofRecord(r, "response")) > 0 })
	req := ofRecord(recs, "request")[0]
	hdr := fmt.Sprint(req["header"])
	if !strings.Contains(hdr, "Impersonate-User:[REDACTED]") || !strings.Contains(hdr, "Impersonate-Group:[system:masters]") || !strings.Contains(fmt.Sprint(ofRecord(recs, "watch")[0]["transport"]), "over TLS straight to "+field("server")) {
		t.Errorf("request %v\nwatch %v", req, ofRecord(recs, "watch"))
	}
	if resp := ofRecord(recs, "response")[0]; resp["statusCode"] != 200.0 {
		t.Errorf("response %v", resp)
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d: %s", code, s.errOut.String())
	}
}

// TestStreamRefused: a server that refuses the connection is named in
// kubectl's words; with no kubeconfig at all, kwatch also says what to set.
func TestStreamRefused(t *testing.T) {
	server := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, errOut, code := run(t, nil, map[string]string{}, "stream", "cm", "--server", "http://"+server)
	want := "kwatch: The connection to the server " + server + " was refused - did you specify the right host or port?\n"
	if code != ExitProblems || errOut != want {
		t.Errorf("exit %d, stderr %q; want 1, %q", code, errOut, want)
	}

	empty := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := &streamOptions{kube: genericclioptions.NewConfigFlags(false)}
	*o.kube.KubeConfig = empty
	refused := &url.Error{Op: "Get", URL: "http://localhost:8080/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	got := o.connectHint(refused, "", "http://localhost:8080").Error()
	if want := "no kubeconfig names a cluster, and no kubectl proxy answers at http://127.0.0.1:8001: set $KUBECONFIG or --kubeconfig, " +
		"or run \"kubectl proxy\" (client-go's default server localhost:8080 refused the connection)"; got != want {
		t.Errorf("no kubeconfig: %q\nwant %q", got, want)
	}
	o.http2 = true
	got = o.connectHint(refused, "", "http://localhost:8080").Error()
	if want := "no kubeconfig names a cluster, and --http2 connects straight to the API server, never through kubectl proxy: " +
		"set $KUBECONFIG or --kubeconfig (client-go's default server localhost:8080 refused the connection)"; got != want {
		t.Errorf("no kubeconfig, --http2: %q\nwant %q", got, want)
	}
}

// TestStreamRawGone: a --raw watch from a resourceVersion that etcd has
// compacted away is answered 410 Expired by the real API server (an ERROR
// event in a 200 stream); a path cannot be listed again, so kwatch stops
// with exit 1 and what to do, after one request, instead of sending the
// same version again.
func TestStreamRawGone(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	var rvs []string
	for _, n := range []string{"first", "second"} {
		pt, err := cs.CoreV1().PodTemplates(ns).Create(context.Background(), &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: n},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, pt.ResourceVersion)
	}
	compactEtcd(t, env.EtcdURL, rvs[1])
	// Watching from before the first object: its revision is compacted.
	first, err := strconv.ParseInt(rvs[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	old := strconv.FormatInt(first-1, 10)
	path := "/api/v1/namespaces/" + ns + "/podtemplates?watch=1&resourceVersion=" + old
	out, errOut, code := run(t, nil, nil, "stream", "--raw", path, "--proxy", env.ProxyURL)
	if code != ExitProblems {
		t.Fatalf("exit %d, want 1; stderr %q\n%s", code, errOut, out)
	}
	want := "resourceVersion " + old + " is too old (410 Gone), and a --raw path cannot be listed again"
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want it to say %q", errOut, want)
	}
	if n := strings.Count(out, "> GET "); n != 1 || !strings.Contains(out, "ERROR     410 Expired") ||
		!strings.Contains(out, "WATCH 1 from resourceVersion "+old+" ·") {
		t.Errorf("%d requests, want 1 from resourceVersion %s answered with an ERROR 410 event:\n%s", n, old, out)
	}
}

// TestStreamWatchList: --list-mode watch-list gets the current state as
// the watch's first events (sendInitialEvents=true), gzip'd as the API
// server answers a Go client, marked initial up to the initial-events-end
// bookmark; later events are not initial; --disable-compression asks for a
// plain body.
func TestStreamWatchList(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	createConfigMaps(t, cs, ns, nil, "one", "two")
	for _, plain := range []bool{false, true} {
		args := []string{"stream", "cm", "-n", ns, "--list-mode", "watch-list", "--proxy", env.ProxyURL, "-o", "json"}
		if plain {
			args = append(args, "--disable-compression")
		}
		s := startKwatch(t, args...)
		s.waitFor(t, 30*time.Second, "the initial-events-end bookmark", func(recs []map[string]any) bool {
			for _, e := range events(recs, "") {
				if e["initialEventsEnd"] == true {
					return true
				}
			}
			return false
		})
		name := fmt.Sprintf("later-%v", plain)
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		recs := s.waitFor(t, 30*time.Second, "the later object's event", func(recs []map[string]any) bool { return len(events(recs, name)) > 0 })
		s.stop(t)
		// The API server may send a bookmark at any time to a watch that
		// allows them (API concepts, "Watch bookmarks"; CI saw one come
		// right after the later object's event): only the
		// initial-events-end bookmark has a place in the list.
		var got []string
		for _, e := range events(recs, "") {
			switch {
			case e["initialEventsEnd"] == true:
				got = append(got, fmt.Sprintf("BOOKMARK initial-events-end initial=%v", e["initial"] == true))
			case e["type"] != "BOOKMARK":
				got = append(got, fmt.Sprintf("%v %v initial=%v", e["type"], e["name"], e["initial"] == true))
			}
		}
		want := fmt.Sprintf("[ADDED one initial=true ADDED two initial=true BOOKMARK initial-events-end initial=false ADDED %s initial=false]", name)
		if plain { // the first run's later object is part of the current state now
			want = fmt.Sprintf("[ADDED later-false initial=true ADDED one initial=true ADDED two initial=true BOOKMARK initial-events-end initial=false ADDED %s initial=false]", name)
		}
		if fmt.Sprint(got) != want {
			t.Errorf("disable-compression %v: events %v\nwant %s", plain, got, want)
		}
		resp := ofRecord(recs, "response")
		enc, _ := resp[0]["contentEncoding"].(string)
		if len(resp) == 0 || (enc == "gzip") == plain {
			t.Errorf("disable-compression %v: response content encoding %q", plain, enc)
		}
		w := ofRecord(recs, "watch")
		if len(w) == 0 || !strings.Contains(w[0]["path"].(string), "sendInitialEvents=true") || len(ofRecord(recs, "list")) != 0 {
			t.Errorf("disable-compression %v: watch %v, %d LIST records; want a watch-list and no LIST", plain, w, len(ofRecord(recs, "list")))
		}
	}
}

// TestStreamNamespaceNotFound: a watch in a namespace that does not exist
// (a mistyped -n) is answered with an empty state, as kubectl get's; kwatch
// says so once, and goes on watching.
func TestStreamNamespaceNotFound(t *testing.T) {
	env := e2e.Cluster(t)
	missing := env.Namespace(t) + "-missing" // derived from a fresh name: not there
	s := startKwatch(t, "stream", "configmaps", "-n", missing, "--proxy", env.ProxyURL, "-o", "json")
	recs := s.waitFor(t, 30*time.Second, "the namespace warning", func(r []map[string]any) bool {
		return len(ofRecord(r, "problem")) > 0
	})
	p := ofRecord(recs, "problem")[0]
	if p["problem"] != "namespace not found" || p["severity"] != "warning" ||
		p["detail"] != fmt.Sprintf("namespace %q does not exist: no configmaps in it", missing) {
		t.Errorf("problem %v", p)
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d: %s", code, s.errOut.String())
	}
}

// TestStreamAheadOfServer: after a cluster's etcd was restored or reset, a
// resumed watch asks for a resourceVersion ahead of the server's (here one
// far past the stack's current version, as a reset leaves it); the API
// server answers 200 OK and then sends nothing, not even bookmarks. kwatch
// stream says so once --bookmark-timeout passed, with the server's current
// version and the likely cause, and goes on watching.
func TestStreamAheadOfServer(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	list, err := env.Clientset(t).CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("the server's resourceVersion %q: %v", list.ResourceVersion, err)
	}
	ahead := strconv.FormatUint(cur+1_000_000, 10)
	s := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "--resource-version", ahead, "--bookmark-timeout", "3s", "-o", "json")
	recs := s.waitFor(t, 60*time.Second, "the quiet watch said", func(r []map[string]any) bool {
		for _, p := range ofRecord(r, "problem") {
			if p["problem"] == "watch quiet" {
				return true
			}
		}
		return false
	})
	for _, p := range ofRecord(recs, "problem") {
		if p["problem"] != "watch quiet" {
			continue
		}
		detail, hint := fmt.Sprint(p["detail"]), fmt.Sprint(p["hint"])
		if p["severity"] != "warning" || !strings.Contains(detail, "it watches from resourceVersion "+ahead+", ahead of the server's current ") ||
			!strings.Contains(hint, "etcd was restored or reset") {
			t.Errorf("warning %v", p)
		}
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d after Ctrl-C, want 0 (a warning does not change it)", code)
	}
}
