package cmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/node"
)

// The tests of kwatch on the stack's nodes run kwatch as a laptop runs it:
// in this process, with the stack's admin kubeconfig and kwatch's image
// (e2e.Image: imported into each node), through the API server only; the
// test uses no node itself (no root, no file of a node), except to kill a
// kwatch it started, as Ctrl-C can not.

// onNodes is kwatch's arguments for a run on the stack's nodes: the admin
// kubeconfig, kwatch's image, and the pods in podNS.
func onNodes(env *e2e.Env, ref, podNS string, args ...string) []string {
	return append(args, "--kubeconfig", env.Kubeconfig, "--image", ref, "--pod-namespace", podNS)
}

// podNamespace makes a namespace of the test's own for kwatch's pods,
// labelled to let privileged pods in (as kwatch labels its own).
func podNamespace(t *testing.T, env *e2e.Env) string {
	t.Helper()
	ns := env.Namespace(t)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"privileged"}}}`, node.LabelEnforce)
	if _, err := env.Clientset(t).CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// kwatchPods lists kwatch's pods in every namespace, as kubectl get pods
// -A -l … does, those of namespace ns (a test's own).
func kwatchPods(t *testing.T, cs kubernetes.Interface, ns string) []string {
	t.Helper()
	list, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{LabelSelector: node.Selector})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		if p.Namespace == ns {
			out = append(out, p.Namespace+"/"+p.Name+" "+string(p.Status.Phase))
		}
	}
	return out
}

// nodesOf returns the nodes that kwatch's connection records name, by the
// text of each connection.
func nodesOf(recs []map[string]any) map[string]string {
	out := map[string]string{}
	for _, r := range recs {
		if r["record"] == "connection" {
			out[fmt.Sprint(r["connection"])] = fmt.Sprint(r["node"])
		}
	}
	return out
}

// TestNodeAttachAPIServer runs kwatch attach --node NODE kube-apiserver
// from this "laptop": a client-go program's watch events (its informer and
// its plain Watch, started after kwatch attached) are among the API
// server's, each connection naming the node; Ctrl-C (SIGINT to kwatch's
// process) ends the run with no kwatch pod left.
func TestNodeAttachAPIServer(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, kwatch := env.Image(t)
	podNS := podNamespace(t, env)
	ns := env.Namespace(t)
	s := startKwatchProcess(t, kwatch, onNodes(env, ref, podNS, "attach", "--node", nodes[0].Name, "kube-apiserver", "-o", "json")...)
	recs := watcherSeen(t, env, s, nodes[0].Name, ns)
	byConn := nodesOf(recs)
	for _, r := range recs {
		if r["record"] == "event" && r["namespace"] == ns {
			if r["node"] != nodes[0].Name || byConn[fmt.Sprint(r["connection"])] != nodes[0].Name {
				t.Errorf("event of %v names node %v, its connection %v; want %s", r["connection"], r["node"], byConn[fmt.Sprint(r["connection"])], nodes[0].Name)
			}
		}
	}
	if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
		t.Errorf("exit %d after Ctrl-C:\n%s", code, s.errOut.String())
	}
	if left := kwatchPods(t, env.Clientset(t), podNS); len(left) > 0 {
		t.Errorf("kwatch pods left after Ctrl-C: %v", left)
	}
	if !strings.Contains(s.errOut.String(), "kwatch: 1 node: "+nodes[0].Name+" (exit ") {
		t.Errorf("stderr does not say how kwatch on the node ended:\n%s", s.errOut.String())
	}
}

// watcherSeen waits until kwatch (session s, -o json, attaching to
// kube-apiserver on node) has attached, runs a client-go program that
// watches ConfigMaps of ns (an informer and a plain Watch), changes one,
// and waits until kwatch's events of the program's watches are those the
// program's handlers received; it returns kwatch's records.
func watcherSeen(t *testing.T, env *e2e.Env, s *session, node, ns string) []map[string]any {
	t.Helper()
	bin := buildWatcher(t)
	waitText(t, "kwatch attached on the node", s.errOut, "node "+node+": attached to kube-apiserver (pid ")
	w := startWatcher(t, env, bin, ns)
	churn(t, env, ns, "on-node")
	want := w.waitEvents(t, 3, "informer", "watch")
	recs := s.waitFor(t, 90*time.Second, fmt.Sprintf("the API server's events of the program's watches: %v", want), func(recs []map[string]any) bool {
		return holdsWatches(kwatchEvents(t, recs, ns, true), want)
	})
	w.stop()
	return recs
}

// TestNodeTop: --top on a run on a node (stdout a pipe: a plain table
// every second), with the filters --resource configmaps -n NS, shows a
// client-go program's watches of NS as rows that name the program and the
// node, with their events (3 or more: bookmarks are counted too), and no
// other row; Ctrl-C ends it with the summary, which counts the watches
// the filters left out.
func TestNodeTop(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, _ := env.Image(t)
	podNS := podNamespace(t, env)
	bin := buildWatcher(t)
	ns := env.Namespace(t)
	s := startKwatch(t, onNodes(env, ref, podNS, "attach", "--node", nodes[0].Name, "kube-apiserver", "--top", "--resource", "configmaps", "-n", ns)...)
	waitText(t, "kwatch attached on the node", s.errOut, "node "+nodes[0].Name+": attached to kube-apiserver (pid ")
	w := startWatcher(t, env, bin, ns)
	churn(t, env, ns, "top")
	w.waitEvents(t, 3, "informer", "watch")
	row := regexp.MustCompile(`\sconfigmaps\s+` + regexp.QuoteMeta(ns) + `\s+(\d+)\s`)
	deadline := time.Now().Add(90 * time.Second)
	for {
		tables := strings.Split(s.out.String(), "\n\n")
		last := tables[max(len(tables)-2, 0)]
		rows := 0
		for _, l := range strings.Split(last, "\n") {
			if !strings.HasPrefix(l, "#") {
				continue // the table's time, header and footer
			}
			// Events, bookmarks counted: the informer's watch-list has
			// its initial-events-end bookmark besides the 3 changes.
			m := row.FindStringSubmatch(l)
			switch {
			case m == nil:
				t.Errorf("a row the filters leave out (--resource configmaps -n %s): %q", ns, l)
			case atoi(m[1]) >= 3:
				rows++
				if !strings.Contains(l, "kwatch-watcher/") || !strings.Contains(l, "node "+nodes[0].Name) {
					t.Errorf("the row does not name the program and its node: %q", l)
				}
			}
		}
		if rows == 2 { // the informer's watch and the plain Watch
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two rows of 3 events or more in namespace %s:\n%s\nstderr:\n%s", ns, s.out.String(), s.errOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.stop()
	if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
		t.Errorf("exit %d:\n%s", code, s.errOut.String())
	}
	if got := s.out.String(); !regexp.MustCompile(`(?m)^summary: 1 node · .* watches \(\d+ left out by the filters\)`).MatchString(got) || strings.Contains(got, " ADDED ") {
		t.Errorf("want tables, then the summary of 1 node counting the watches the filters left out, and no event line:\n%s", got)
	}
	if left := kwatchPods(t, env.Clientset(t), podNS); len(left) > 0 {
		t.Errorf("kwatch pods left: %v", left)
	}
}

// atoi is strconv.Atoi of digits.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// runController runs kwatch-watcher, a client-go controller of ConfigMaps
// in ns, in a pod on node (its own image, e2e.ProgramImage; the admin
// kubeconfig from a Secret; the node's network, where the API server
// listens), and waits until it is ready. Its handlers' events come out of
// its log (pods/log).
func runController(t *testing.T, env *e2e.Env, ref, ns, name, nodeName string) *corev1.Pod {
	t.Helper()
	cs := env.Clientset(t)
	ctx := context.Background()
	// The kubeconfig with its files inside (kubectl config view
	// --flatten): the pod has none of this machine's.
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err == nil {
		err = clientcmdapi.FlattenConfig(cfg)
	}
	var kubeconfig []byte
	if err == nil {
		kubeconfig, err = clientcmd.Write(*cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"}, Data: map[string][]byte{"config": kubeconfig}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "controller"}},
		Spec: corev1.PodSpec{
			NodeName: nodeName, HostNetwork: true, AutomountServiceAccountToken: &no, RestartPolicy: corev1.RestartPolicyNever,
			Volumes: []corev1.Volume{{Name: "kube", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret.Name}}}},
			Containers: []corev1.Container{{
				Name: "controller", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"--kubeconfig", "/kube/config", "--namespace", ns},
				// It runs until its stdin ends: held open, never written.
				Stdin:        true,
				VolumeMounts: []corev1.VolumeMount{{Name: "kube", MountPath: "/kube", ReadOnly: true}},
			}},
		},
	}
	made, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		grace := int64(1)
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		for i := 0; i < 120; i++ {
			if _, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		log, _ := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "controller"}).DoRaw(ctx)
		if strings.Contains(string(log), "ready\n") {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		p, _ := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if ended := p != nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded); ended || time.Now().After(deadline) {
			t.Fatalf("controller pod %s/%s not ready (within 90s): %+v\nlog:\n%s", ns, made.Name, p.Status, log)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// controllerEvents returns the events a controller pod's handlers got, by
// source, from its log.
func controllerEvents(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) map[string][]watchedEvent {
	t.Helper()
	log, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "controller"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]watchedEvent{}
	sc := bufio.NewScanner(strings.NewReader(string(log)))
	for sc.Scan() {
		var l struct{ Source, Type, Name, ResourceVersion string }
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("controller log line %q: %v", sc.Text(), err)
		}
		out[l.Source] = append(out[l.Source], watchedEvent{l.Type, l.Name, l.ResourceVersion})
	}
	return out
}

// waitControllerEvents waits until a controller pod's handlers got n
// events from each of its watches.
func waitControllerEvents(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, n int) map[string][]watchedEvent {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := controllerEvents(t, cs, pod)
		if len(got["informer"]) >= n && len(got["watch"]) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("controller %s's handlers got %v", pod.Name, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// eventsOfNode returns kwatchEvents of the records of one node.
func eventsOfNode(t *testing.T, recs []map[string]any, ns, nodeName string) map[string][]watchedEvent {
	var mine []map[string]any
	for _, r := range recs {
		if r["record"] != "event" || r["node"] == nodeName {
			mine = append(mine, r)
		}
	}
	return kwatchEvents(t, mine, ns, true)
}

// TestNodeAttachPod: a controller running in a pod, connected long before
// kwatch comes (its connection joined mid-way, its TLS state read from its
// memory), attached by its pod's name from this "laptop": kwatch's events
// of its watches are those its handlers got.
func TestNodeAttachPod(t *testing.T) {
	needAttach(t) // the stack's nodes run on this machine's kernel: uprobes
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, _ := env.Image(t)
	ctlRef := env.ProgramImage(t, "internal/e2e/cmd/kwatch-watcher")
	podNS := podNamespace(t, env)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	ctl := runController(t, env, ctlRef, ns, "my-controller", nodes[len(nodes)-1].Name)
	s := startKwatch(t, onNodes(env, ref, podNS, "attach", "pod/my-controller", "-n", ns, "-o", "json")...)
	waitText(t, "kwatch attached to the controller", s.errOut, "node "+ctl.Spec.NodeName+": attached to kwatch-watcher (pid ")
	churn(t, env, ns, "by-pod")
	want := waitControllerEvents(t, cs, ctl, 3)
	var got map[string][]watchedEvent
	s.waitFor(t, 90*time.Second, fmt.Sprintf("kwatch's events of the controller's watches, as its handlers': %v", want), func(recs []map[string]any) bool {
		got = kwatchEvents(t, recs, ns, true)
		return sameWatches(got, want)
	})
	if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
		t.Errorf("exit %d:\n%s", code, s.errOut.String())
	}
	if !strings.Contains(s.errOut.String(), "--container-id "+strings.TrimPrefix(ctl.Status.ContainerStatuses[0].ContainerID, "containerd://")) {
		t.Errorf("kwatch on the node was not told the controller's container:\n%s", s.errOut.String())
	}
	if left := kwatchPods(t, cs, podNS); len(left) > 0 {
		t.Errorf("kwatch pods left: %v", left)
	}
}

// TestNodeTwoNodes: two controllers, one on each node, attached by their
// pods' names at once: each node's events are those of its controller,
// and the two nodes' events come merged in time order.
func TestNodeTwoNodes(t *testing.T) {
	needAttach(t)
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	if len(nodes) < 2 {
		t.Fatalf("the stack runs %d node; this test needs two (KWATCH_NODES)", len(nodes))
	}
	ref, _ := env.Image(t)
	ctlRef := env.ProgramImage(t, "internal/e2e/cmd/kwatch-watcher")
	podNS := podNamespace(t, env)
	ns := env.Namespace(t)
	cs := env.Clientset(t)
	a := runController(t, env, ctlRef, ns, "ctl-a", nodes[0].Name)
	b := runController(t, env, ctlRef, ns, "ctl-b", nodes[1].Name)
	// A window of 10 s: a node's records wait that long for the other's
	// (the default 1 s, on a busy machine, may let a slower stream's
	// records come late: counted, and shown out of order).
	s := startKwatch(t, onNodes(env, ref, podNS, "attach", "pod/ctl-a", "pod/ctl-b", "-n", ns, "-o", "json", "--merge-window", "10s")...)
	for _, n := range nodes[:2] {
		waitText(t, "kwatch attached on "+n.Name, s.errOut, "node "+n.Name+": attached to kwatch-watcher (pid ")
	}
	// The controllers' connections were open before kwatch came: the
	// first changes settle them (their TLS state read at their next use,
	// the records held meanwhile decoded at once); then changes a third
	// apart, whose events each controller gets as they come.
	churn(t, env, ns, "settle")
	waitControllerEvents(t, cs, a, 3)
	waitControllerEvents(t, cs, b, 3)
	churnSlowly(t, env, ns, "two-nodes", time.Second)
	wantA, wantB := waitControllerEvents(t, cs, a, 6), waitControllerEvents(t, cs, b, 6)
	recs := s.waitFor(t, 90*time.Second, "both controllers' events", func(recs []map[string]any) bool {
		return sameWatches(eventsOfNode(t, recs, ns, nodes[0].Name), wantA) && sameWatches(eventsOfNode(t, recs, ns, nodes[1].Name), wantB)
	})
	// Merged in time order: each event of the run comes no earlier than
	// the one before it, whichever node it came from; both nodes' events
	// interleave.
	var last time.Time
	var seq, order []string
	for _, r := range recs {
		if r["record"] != "event" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(last) {
			t.Errorf("event at %s (node %v) after one at %s: not in time order", at.Format(time.RFC3339Nano), r["node"], last.Format(time.RFC3339Nano))
		}
		last = at
		if r["namespace"] == ns && r["name"] == "two-nodes" {
			seq = append(seq, fmt.Sprint(r["node"]))
			order = append(order, fmt.Sprintf("%s %v %v %v", at.Format("15:04:05.000000"), r["node"], r["type"], r["resourceVersion"]))
		}
	}
	if changes := len(slices.Compact(slices.Clone(seq))); changes < 4 {
		t.Errorf("the two nodes' events do not interleave:\n%s", strings.Join(order, "\n"))
	}
	if strings.Contains(s.errOut.String(), "shown out of time order") {
		t.Errorf("records shown out of time order:\n%s", s.errOut.String())
	}
	if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
		t.Errorf("exit %d:\n%s", code, s.errOut.String())
	}
	if left := kwatchPods(t, cs, podNS); len(left) > 0 {
		t.Errorf("kwatch pods left: %v", left)
	}
}

// churnSlowly is churn with pause between the changes.
func churnSlowly(t *testing.T, env *e2e.Env, ns, name string, pause time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := env.Clientset(t).CoreV1().ConfigMaps(ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"step": "1"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"step":"2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeSameConnection: the stack's two nodes share one machine, so
// kwatch attached to kube-apiserver on both sees every connection twice:
// each is shown once, with a note, and a program's watches once each.
func TestNodeSameConnection(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	if len(nodes) < 2 {
		t.Fatalf("the stack runs %d node; this test needs two (KWATCH_NODES)", len(nodes))
	}
	ref, _ := env.Image(t)
	podNS := podNamespace(t, env)
	bin := buildWatcher(t)
	ns := env.Namespace(t)
	s := startKwatch(t, onNodes(env, ref, podNS, "attach", "--node", nodes[0].Name+","+nodes[1].Name, "kube-apiserver", "-o", "json")...)
	for _, n := range nodes[:2] {
		waitText(t, "kwatch attached on "+n.Name, s.errOut, "node "+n.Name+": attached to kube-apiserver (pid ")
	}
	w := startWatcher(t, env, bin, ns)
	churn(t, env, ns, "seen-twice")
	want := w.waitEvents(t, 3, "informer", "watch")
	recs := s.waitFor(t, 90*time.Second, "the program's watches, and the note of a connection seen twice", func(recs []map[string]any) bool {
		if !holdsWatches(kwatchEvents(t, recs, ns, true), want) {
			return false
		}
		for _, r := range recs {
			if r["record"] == "note" && r["kind"] == "node" {
				return true
			}
		}
		return false
	})
	w.stop()
	// Each watch of the program once: its three events are not doubled.
	for k, evs := range kwatchEvents(t, recs, ns, true) {
		if len(evs) > 3 {
			t.Errorf("watch %s: %d events (%v), shown twice?", k, len(evs), evs)
		}
	}
	if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
		t.Errorf("exit %d:\n%s", code, s.errOut.String())
	}
}

// TestNodePcap runs kwatch pcap -i any --node NODE --port PROXY from this
// "laptop": a watch through kubectl proxy (kwatch stream's own) shows the
// same events as kwatch stream saw.
func TestNodePcap(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, _ := env.Image(t)
	podNS := podNamespace(t, env)
	ns := env.Namespace(t)
	port := strings.TrimPrefix(env.ProxyURL[strings.LastIndex(env.ProxyURL, ":"):], ":")
	s := startKwatch(t, onNodes(env, ref, podNS, "pcap", "-i", "any", "--port", port, "--node", nodes[0].Name, "-o", "json")...)
	waitText(t, "kwatch capturing on the node", s.errOut, "node "+nodes[0].Name+": capturing TCP port "+port+" on any")
	st := startKwatch(t, "stream", "configmaps", "-n", ns, "--proxy", env.ProxyURL, "-o", "json")
	st.waitFor(t, 60*time.Second, "kwatch stream's watch", func(recs []map[string]any) bool {
		return slices.ContainsFunc(recs, func(r map[string]any) bool { return r["record"] == "response" })
	})
	churn(t, env, ns, "captured")
	streamed := st.waitFor(t, 60*time.Second, "kwatch stream's three events", func(recs []map[string]any) bool {
		n := 0
		for _, evs := range kwatchEvents(t, recs, ns, false) {
			n += len(evs)
		}
		return n == 3
	})
	want := kwatchEvents(t, streamed, ns, false)
	recs := s.waitFor(t, 90*time.Second, fmt.Sprintf("the events captured on the node: %v", want), func(recs []map[string]any) bool {
		return holdsWatches(kwatchEvents(t, recs, ns, false), want)
	})
	for conn, n := range nodesOf(recs) {
		if n != nodes[0].Name {
			t.Errorf("connection %s names node %q", conn, n)
		}
	}
	st.stop(t)
	if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
		t.Errorf("exit %d:\n%s", code, s.errOut.String())
	}
	if left := kwatchPods(t, env.Clientset(t), podNS); len(left) > 0 {
		t.Errorf("kwatch pods left: %v", left)
	}
}

// TestNodeRefusals: what kwatch cannot do on nodes is said in one line
// (stderr's last), exit 2, and no pod is left: a node that does not exist,
// a namespace whose PodSecurity level is baseline (the admission's
// answer), an image the node cannot get (at the kubelet's first pull
// error, not at --pod-running-timeout: its reason is said), no such process
// on a node named. RBAC refusals: TestNodeRBAC.
func TestNodeRefusals(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, _ := env.Image(t)
	cs := env.Clientset(t)
	podNS := podNamespace(t, env)
	baseline := env.Namespace(t)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"baseline"}}}`, node.LabelEnforce)
	if _, err := cs.CoreV1().Namespaces().Patch(context.Background(), baseline, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		ns   string
		want []string
	}{
		{name: "no such node", args: []string{"attach", "--node", "no-such-node", "kube-apiserver"},
			want: []string{"kwatch: node no-such-node does not exist (kubectl get nodes lists them)"}},
		{name: "baseline", args: []string{"attach", "--node", nodes[0].Name, "kube-apiserver"}, ns: baseline,
			want: []string{"kwatch: namespace " + baseline + ` enforces PodSecurity "baseline:latest", which refuses kwatch's pods (host namespaces, privileged): label it privileged`,
				`(violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), privileged`}},
		{name: "image", args: []string{"attach", "--node", nodes[0].Name, "kube-apiserver", "--image", "kwatch:no-such-tag", "--image-pull-policy", "Never"},
			want: []string{"cannot get image kwatch:no-such-tag (ErrImageNeverPull: ", "make image-push IMAGE=REGISTRY/kwatch"}},
		{name: "no such process", args: []string{"attach", "--node", nodes[0].Name, "no-such-process"},
			want: []string{"kwatch: node " + nodes[0].Name + ": no such process named no-such-process (as pgrep -x no-such-process finds them)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := podNS
			if tc.ns != "" {
				ns = tc.ns
			}
			args := onNodes(env, ref, ns, tc.args...)
			if slices.Contains(tc.args, "--image") {
				args = append(tc.args, "--kubeconfig", env.Kubeconfig, "--pod-namespace", ns)
			}
			_, errOut, code := runWithin(t, 3*time.Minute, args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want 2:\n%s", code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("the refusal lacks %q:\n%s", w, errOut)
				}
			}
			if left := kwatchPods(t, cs, ns); len(left) > 0 {
				t.Errorf("kwatch pods left: %v", left)
			}
		})
	}
}

// TestNodeRBAC runs kwatch on a node as a user RBAC limits (--as, as
// kubectl impersonates; the stack's kube-apiserver authorizes with RBAC):
// with no rule bound, the one-line refusal names every verb and resource
// missing and makes nothing; with the Role and ClusterRole that
// docs/nodes.md gives (read from it), kwatch attach --node NODE
// kube-apiserver runs and shows a client-go program's watch events, and
// Ctrl-C deletes its pod.
func TestNodeRBAC(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, kwatch := env.Image(t)
	cs := env.Clientset(t)
	podNS := podNamespace(t, env)
	user := "kwatch-e2e-" + podNS
	ctx := context.Background()
	r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: podNS}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status.Allowed {
		t.Fatalf("the stack's kube-apiserver lets user %s, bound to nothing, create pods: it does not authorize with RBAC (a stack started before hack/cluster-up.sh set --authorization-mode=RBAC: make cluster-down cluster-up)", user)
	}
	args := append(onNodes(env, ref, podNS, "attach", "--node", nodes[0].Name, "kube-apiserver", "-o", "json"), "--as", user)

	t.Run("no rule", func(t *testing.T) {
		_, errOut, code := runWithin(t, 3*time.Minute, args...)
		want := "kwatch: RBAC: user " + user + " may not create pods in namespace " + podNS + ", get pods in namespace " + podNS +
			", delete pods in namespace " + podNS + ", create pods/exec in namespace " + podNS + ", get nodes: kwatch needs them to run its pods on nodes (docs/nodes.md lists a Role and ClusterRole that grant them)"
		if lines := strings.Split(strings.TrimSpace(errOut), "\n"); code != ExitUsage || lines[len(lines)-1] != want {
			t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and last line\n%s", code, errOut, want)
		}
	})

	t.Run("the rules of docs/nodes.md", func(t *testing.T) {
		bindDocsRBAC(t, cs, podNS, user)
		ns := env.Namespace(t)
		s := startKwatchProcess(t, kwatch, args...)
		watcherSeen(t, env, s, nodes[0].Name, ns)
		if code := stopNodes(t, s); code != ExitOK && code != ExitProblems {
			t.Errorf("exit %d after Ctrl-C:\n%s", code, s.errOut.String())
		}
		if left := kwatchPods(t, cs, podNS); len(left) > 0 {
			t.Errorf("kwatch pods left after Ctrl-C: %v", left)
		}
	})
}

// bindDocsRBAC reads the ClusterRole and Role of docs/nodes.md's RBAC
// section, makes them (the ClusterRole named after ns, the Role in ns) and
// binds them to user; they are deleted when the test ends.
func bindDocsRBAC(t *testing.T, cs kubernetes.Interface, ns, user string) {
	t.Helper()
	doc, err := os.ReadFile("../docs/nodes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "\n## RBAC\n")
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	text, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatal("docs/nodes.md: no yaml block in its RBAC section")
	}
	ctx := context.Background()
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	var made int
	for _, part := range strings.Split(text, "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(part), nil, nil)
		if err != nil {
			t.Fatalf("docs/nodes.md's RBAC: %v", err)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			o.Name += "-" + ns
			if _, err := cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
			b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: o.Name}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.Name}}
			if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
			})
		case *rbacv1.Role:
			o.Namespace = ns
			if _, err := cs.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: o.Name}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: o.Name}}
			if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("docs/nodes.md's RBAC: a %T, want a ClusterRole and a Role", obj)
		}
		made++
	}
	if made != 2 {
		t.Fatalf("docs/nodes.md's RBAC: %d objects, want a ClusterRole and a Role", made)
	}
}

// runWithin is run for a kwatch that must end by itself: after d it is
// told to end (Ctrl-C) and the test fails.
func runWithin(t *testing.T, d time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errOut syncBuffer
	code := Execute(ctx, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" }}, args)
	if ctx.Err() != nil {
		t.Errorf("kwatch %s did not end within %s:\n%s", strings.Join(args, " "), d, errOut.String())
	}
	return out.String(), errOut.String(), code
}

// stopNodes ends a kwatch run on nodes as Ctrl-C does and returns its exit
// status: kwatch on each node ends and its pod is deleted and waited for,
// which takes longer than session.stop allows on a busy machine.
func stopNodes(t *testing.T, s *session) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code
		return code
	case <-time.After(2 * time.Minute):
		t.Fatalf("kwatch did not end within 2m of Ctrl-C; stderr:\n%s", s.errOut.String())
	}
	return -1
}

// startKwatchProcess runs kwatch's binary bin with args as a process of
// its own, as a shell runs it (no terminal, stdin empty); its session's
// cancel sends it SIGINT, as Ctrl-C does.
func startKwatchProcess(t *testing.T, bin string, args ...string) *session {
	t.Helper()
	s := &session{out: &syncBuffer{}, errOut: &syncBuffer{}, done: make(chan int, 1)}
	k := exec.Command(bin, args...)
	k.Stdout, k.Stderr = s.out, s.errOut
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	s.cancel = func() { _ = k.Process.Signal(os.Interrupt) }
	go func() {
		err := k.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			s.done <- 0
		case errors.As(err, &ee):
			s.done <- ee.ExitCode()
		default:
			s.done <- -1
		}
	}()
	t.Cleanup(func() {
		select {
		case code := <-s.done:
			s.done <- code
		default:
			_ = k.Process.Kill()
		}
	})
	return s
}

// TestNodeCleanAfterKill: kwatch node clean leaves the pod of a kwatch
// running on a node (its holder says a kwatch runs in it), and says so; a
// kwatch killed while it runs there (kill -9: it deletes nothing) leaves
// its pod, which kwatch node clean then deletes.
func TestNodeCleanAfterKill(t *testing.T) {
	env := e2e.Cluster(t)
	nodes := env.Nodes(t)
	ref, bin := env.Image(t)
	cs := env.Clientset(t)
	podNS := podNamespace(t, env)
	var errOut syncBuffer
	k := exec.Command(bin, onNodes(env, ref, podNS, "attach", "--node", nodes[0].Name, "kube-apiserver")...)
	k.Stdout, k.Stderr = &syncBuffer{}, &errOut
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Process.Kill(); _ = k.Wait() })
	waitText(t, "kwatch attached on the node", &errOut, "node "+nodes[0].Name+": attached to kube-apiserver (pid ")
	live := kwatchPods(t, cs, podNS)
	if len(live) != 1 {
		t.Fatalf("a running kwatch has pods %v, want one", live)
	}
	name := strings.Fields(strings.TrimPrefix(live[0], podNS+"/"))[0]
	out, errText, code := run(t, nil, nil, "node", "clean", "-n", podNS, "--kubeconfig", env.Kubeconfig)
	if want := "kwatch: pod/" + name + " left: kwatch runs in it now (1 process: another run's) (--force deletes it)\n"; code != ExitOK || out != "" || errText != want {
		t.Errorf("kwatch node clean beside a running kwatch: exit %d, stdout %q, stderr %q; want stderr %q", code, out, errText, want)
	}
	if left := kwatchPods(t, cs, podNS); len(left) != 1 {
		t.Fatalf("kwatch node clean beside a running kwatch: its pods are %v, want its one", left)
	}
	if err := k.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = k.Wait()
	left := kwatchPods(t, cs, podNS)
	if len(left) != 1 {
		t.Fatalf("a killed kwatch left %v, want its one pod", left)
	}
	out, errText, code = run(t, nil, nil, "node", "clean", "-n", podNS, "--kubeconfig", env.Kubeconfig)
	if code != ExitOK || out != "pod/"+name+" deleted\n" {
		t.Errorf("kwatch node clean: exit %d, stdout %q, stderr %q; want pod/%s deleted", code, out, errText, name)
	}
	if left := kwatchPods(t, cs, podNS); len(left) > 0 {
		t.Errorf("kwatch pods left after kwatch node clean: %v", left)
	}
}
