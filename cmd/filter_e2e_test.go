package cmd

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kwatch/kwatch/internal/e2e"
)

// TestAttachFilters attaches to kube-apiserver with the filters while two
// client-go programs watch ConfigMaps, one in namespace ns and one in ns2,
// and kubectl watches the Secrets of ns (all three started after attach),
// and kube-controller-manager's connection (opened long before) carries
// its informers' watches:
//
//   - --resource configmaps -n ns shows the watches of ns's ConfigMaps
//     alone, every event the program got, and no other record of a watch;
//     the summary counts the others left out;
//   - --user-agent kube-controller-manager shows kube-controller-manager's
//     watches alone (its joined streams, whose User-Agent is an HPACK entry
//     from before the join, kept by its process's name), each watch's first
//     record naming it (JSON's identity, the readable line's "client …"),
//     and counts the others left out;
//   - --client kube-controller-manager decodes its connections alone;
//   - --top with --resource configmaps -n ns (a plain table on a pipe) has
//     rows for ns's ConfigMap watches alone.
func TestAttachFilters(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	ns, ns2 := env.Namespace(t), env.Namespace(t)
	kcm, err := env.ControllerManager()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildWatcher(t)
	byResource := startKwatch(t, "attach", "kube-apiserver", "-o", "json", "--resource", "configmaps", "-n", ns)
	pretty := startKwatch(t, "attach", "kube-apiserver", "--resource", "configmaps", "-n", ns)
	byAgent := startKwatch(t, "attach", "kube-apiserver", "-o", "json", "--user-agent", "kube-controller-manager")
	byClient := startKwatch(t, "attach", "kube-apiserver", "-o", "json", "--client", "kube-controller-manager")
	prettyAgent := startKwatch(t, "attach", "kube-apiserver", "--user-agent", "kube-controller-manager")
	topped := startKwatch(t, "attach", "kube-apiserver", "--top", "--resource", "configmaps", "-n", ns)
	sessions := []*session{byResource, pretty, byAgent, byClient, prettyAgent, topped}
	for _, s := range sessions {
		waitText(t, "kwatch attached", s.errOut, "attached to kube-apiserver (pid")
	}
	w := startWatcher(t, env, bin, ns)
	w2 := startWatcher(t, env, bin, ns2)
	kubectl := filepath.Join(filepath.Dir(env.Kubeconfig), "bin", "kubectl")
	var secrets syncBuffer
	k := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "-n", ns, "get", "secrets", "-w", "--output-watch-events", "-v=6")
	k.Stdout, k.Stderr = &secrets, &secrets
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Process.Kill(); _ = k.Wait() })
	// kubectl's watch is open once kube-apiserver has answered it
	// (client-go's log at -v=6).
	waitText(t, "kubectl's watch of secrets", &secrets, "&watch=true\" status=\"200 OK\"")
	churn(t, env, ns, "kept")
	churn(t, env, ns2, "left-out")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.Clientset(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "left-out"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitText(t, "kubectl's ADDED Secret", &secrets, "left-out")
	want := w.waitEvents(t, 3, "informer", "watch")
	w2.waitEvents(t, 3, "informer", "watch")

	// --resource configmaps -n ns: the program's two watches of ns, whole.
	byResource.waitFor(t, 60*time.Second, fmt.Sprintf("the events of ns's ConfigMap watches, as the program's: %v", want), func(recs []map[string]any) bool {
		return holdsWatches(kwatchEvents(t, recs, ns, true), want)
	})
	// --user-agent kube-controller-manager: one of its events (its
	// informers' bookmarks come every minute, leases more often).
	byAgent.waitFor(t, 90*time.Second, "an event of kube-controller-manager's", func(recs []map[string]any) bool {
		for _, r := range recs {
			if r["record"] == "event" {
				return true
			}
		}
		return false
	})
	byClient.waitFor(t, 90*time.Second, "an event of kube-controller-manager's", func(recs []map[string]any) bool {
		for _, r := range recs {
			if r["record"] == "event" {
				return true
			}
		}
		return false
	})
	// --top: the table's rows of ns's two ConfigMap watches, with the
	// program's three changes each (the informer's watch-list counts its
	// initial-events-end bookmark too, and later bookmarks).
	deadline := time.Now().Add(60 * time.Second)
	for {
		tables := strings.Split(topped.out.String(), "\n\n")
		rows := topRows(tables[max(len(tables)-2, 0)])
		changed := 0
		for _, row := range rows {
			if _, _, n := topRow(row, "configmaps", ns); n >= 3 {
				changed++
			}
		}
		if len(rows) == 2 && changed == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--top --resource configmaps -n %s: no table with the two watches of the program:\n%s", ns, topped.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range sessions {
		if code := s.stop(t); code != ExitOK && code != ExitProblems {
			t.Errorf("exit %d:\n%s", code, s.errOut.String())
		}
	}

	recs := byResource.records(t)
	leftOut := func(recs []map[string]any) map[string]any {
		for _, r := range recs {
			if r["record"] == "summary" {
				l, _ := r["leftOut"].(map[string]any)
				return l
			}
		}
		t.Fatal("no summary record")
		return nil
	}
	for _, r := range recs {
		switch r["record"] {
		case "request":
			if target := fmt.Sprint(r["target"]); !strings.HasPrefix(target, "/api/v1/namespaces/"+ns+"/configmaps?") {
				t.Errorf("--resource configmaps -n %s shows a request of %s", ns, target)
			}
		case "response":
			if r["inferred"] == true {
				t.Errorf("--resource configmaps -n %s shows a stream whose request was not seen: %v", ns, r)
			}
		case "event":
			if r["kind"] != "ConfigMap" || r["type"] != "BOOKMARK" && r["namespace"] != ns {
				t.Errorf("--resource configmaps -n %s shows the event %v %v %v/%v", ns, r["type"], r["kind"], r["namespace"], r["name"])
			}
		}
	}
	if got := kwatchEvents(t, recs, ns, true); !sameWatches(got, want) {
		t.Errorf("--resource configmaps -n %s: watches %v, want the program's %v", ns, got, want)
	}
	// Left out: ns2's two watches and kubectl's of Secrets at least (and
	// kube-controller-manager's: of all namespaces, or joined, whose
	// namespace is not known).
	if l := leftOut(recs); l == nil || l["watches"].(float64) < 3 {
		t.Errorf("--resource configmaps -n %s: leftOut %v, want 3 watches or more", ns, l)
	}
	// The readable output: every watch's first line names
	// kube-controller-manager, or the connection line just above it does.
	lines := strings.Split(prettyAgent.out.String(), "\n")
	named := 0
	for i, l := range lines {
		first := strings.Contains(l, " < HTTP/2.0 200 (HEADERS not captured") || strings.Contains(l, " > GET ") && strings.Contains(l, "watch=")
		if !first {
			continue
		}
		named++
		if !strings.Contains(l, " · client kube-controller-manager") && (i == 0 || !strings.Contains(lines[i-1], " · client kube-controller-manager")) {
			t.Errorf("--user-agent kube-controller-manager: a watch's first line does not name its client:\n%s", l)
		}
	}
	t.Logf("--user-agent kube-controller-manager, readable: %d watches, each named", named)
	if named == 0 || !strings.Contains(prettyAgent.out.String(), " left out by the filters) · ") {
		t.Errorf("--user-agent kube-controller-manager, readable: no watch, or nothing counted as left out:\n%s", prettyAgent.out.String())
	}
	// --top: every row of every table is one of ns's ConfigMap watches;
	// the summary after the table counts the others.
	topOut := topped.out.String()
	for _, table := range strings.Split(topOut, "\n\n") {
		for _, row := range topRows(table) {
			if !strings.Contains(row, " configmaps  "+ns+" ") {
				t.Errorf("--top --resource configmaps -n %s shows the row %q", ns, row)
			}
		}
	}
	if i := strings.LastIndex(topOut, "\nsummary: "); i < 0 || !strings.Contains(topOut[i:], " left out by the filters) · ") {
		t.Errorf("--top: the summary does not count what was left out:\n%s", topOut)
	}
	out := pretty.out.String()
	if !strings.Contains(out, "/api/v1/namespaces/"+ns+"/configmaps?") || strings.Contains(out, ns2) || strings.Contains(out, "/secrets") {
		t.Errorf("--resource configmaps -n %s, readable:\n%s", ns, out)
	}
	if i := strings.LastIndex(out, "\nsummary: "); i < 0 || !strings.Contains(out[i:], " left out by the filters) · ") {
		t.Errorf("the readable summary does not count what was left out:\n%s", out)
	}

	// --user-agent kube-controller-manager and --client
	// kube-controller-manager: every connection shown is its.
	kcmClient := fmt.Sprintf("client kube-controller-manager (pid %d) · server kube-apiserver (pid", kcm.PID)
	for name, s := range map[string]*session{"--user-agent": byAgent, "--client": byClient} {
		recs := s.records(t)
		ofKCM := map[string]bool{}
		for _, r := range recs {
			if r["record"] == "note" && r["kind"] == "process" && strings.HasPrefix(fmt.Sprint(r["message"]), kcmClient) {
				ofKCM[fmt.Sprint(r["connection"])] = true
			}
		}
		events := 0
		for _, r := range recs {
			switch r["record"] {
			case "request", "response", "event", "end":
				if !ofKCM[fmt.Sprint(r["connection"])] {
					t.Errorf("%s kube-controller-manager shows a %s of %v, whose client is not kube-controller-manager", name, r["record"], r["connection"])
				}
			}
			if r["record"] == "event" {
				events++
			}
			if r["record"] != "request" {
				continue
			}
			header, _ := r["header"].(map[string]any)
			if ua, ok := header["User-Agent"].([]any); ok && !strings.Contains(fmt.Sprint(ua...), "kube-controller-manager") {
				t.Errorf("%s kube-controller-manager shows a request of User-Agent %v", name, ua)
			}
		}
		if events == 0 {
			t.Errorf("%s kube-controller-manager: no event of its", name)
		}
		// Each watch's first record names its client (pkg/who): the
		// request's identity, or for a stream whose request came before
		// attach (kube-controller-manager's connection is older than
		// kwatch's attach), the response's, from its connection's
		// process. Those streams were judged by the process's name.
		joined := 0
		requested := map[string]bool{}
		for _, r := range recs {
			key := fmt.Sprint(r["connection"], " ", r["exchange"])
			first := false
			switch {
			case r["record"] == "request":
				requested[key] = true
				first = r["watch"] == true
			case r["record"] == "response" && r["watch"] == true && !requested[key]:
				first = true
				joined++
			}
			if first {
				id, _ := r["identity"].(map[string]any)
				if text := fmt.Sprint(id["text"]); !strings.Contains(text, "kube-controller-manager") {
					t.Errorf("%s kube-controller-manager: a watch's %s names its client %q", name, r["record"], text)
				}
			}
		}
		t.Logf("%s kube-controller-manager: %d watches shown whose request came before attach", name, joined)
		if openBefore(recs, kcmClient) && joined == 0 {
			t.Errorf("%s kube-controller-manager: its connection was open before attach, and no stream joined mid-connection is shown", name)
		}
		// Left out: the three watchers' connections or their watches.
		l := leftOut(recs)
		switch name {
		case "--user-agent":
			if l == nil || l["watches"].(float64) < 5 {
				t.Errorf("%s: leftOut %v, want the 5 watches of the programs and kubectl or more", name, l)
			}
		case "--client":
			if l == nil || l["connections"].(float64) < 3 || l["watches"].(float64) != 0 {
				t.Errorf("%s: leftOut %v, want the 3 connections of the programs and kubectl or more, no watch", name, l)
			}
		}
	}
}

// topRows returns the rows of one of --top's plain tables: the lines after
// its header (WATCH CLIENT …), up to the first empty one.
func topRows(table string) []string {
	var rows []string
	in := false
	for _, l := range strings.Split(table, "\n") {
		switch {
		case strings.HasPrefix(l, "WATCH "):
			in = true
		case l == "" || strings.HasPrefix(l, "health") || strings.HasPrefix(l, "summary:"):
			in = false
		case in:
			rows = append(rows, l)
		}
	}
	return rows
}

// openBefore reports whether a process note of the records says that a
// connection whose client note begins with client was open before kwatch
// attached.
func openBefore(recs []map[string]any, client string) bool {
	for _, r := range recs {
		if m := fmt.Sprint(r["message"]); r["record"] == "note" && r["kind"] == "process" && strings.HasPrefix(m, client) && strings.Contains(m, "open before kwatch attached") {
			return true
		}
	}
	return false
}
