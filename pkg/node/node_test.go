package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/exec"

	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// linuxNode is a Ready Linux node whose kubelet listens on 10250.
func linuxNode(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "worker"}}}
	n.Status.NodeInfo.OperatingSystem = "linux"
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	return n
}

// cluster is a fake API server whose pods run at once (or wait with the
// container state waiting), with generated names, access reviews answered
// by deny, and PodSecurity of a namespace labelled baseline enforced.
type cluster struct {
	*fake.Clientset
	mu      sync.Mutex
	n       int
	waiting *corev1.ContainerStateWaiting
	deny    map[string]bool // "create pods/exec"
	// baseline: the cluster's default PodSecurity level is baseline
	// (AdmissionConfiguration), whatever the namespace's labels say.
	baseline bool
}

func newCluster(objs ...runtime.Object) *cluster {
	c := &cluster{Clientset: fake.NewClientset(objs...), deny: map[string]bool{}}
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		ns, _ := c.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", pod.Namespace)
		if ns, ok := ns.(*corev1.Namespace); ok && ns.Labels[LabelEnforce] == "baseline" || c.baseline {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.GenerateName+"x",
				errors.New(`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), privileged (container "kwatch" must not set securityContext.privileged=true)`))
		}
		c.mu.Lock()
		c.n++
		if pod.Name == "" {
			pod.Name = fmt.Sprintf("%s%05d", pod.GenerateName, c.n)
		}
		c.mu.Unlock()
		pod.Status.Phase = corev1.PodRunning
		st := corev1.ContainerStatus{Name: ContainerName, ContainerID: "containerd://" + pod.Name}
		if c.waiting != nil {
			pod.Status.Phase = corev1.PodPending
			st.State.Waiting = c.waiting
		} else {
			st.State.Running = &corev1.ContainerStateRunning{}
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{st}
		return false, nil, nil // the tracker stores it
	})
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		at := r.Spec.ResourceAttributes
		res := at.Resource
		if at.Subresource != "" {
			res += "/" + at.Subresource
		}
		r.Status.Allowed = !c.deny[at.Verb+" "+res]
		return true, r, nil
	})
	return c
}

// pods lists the pods left in the cluster.
func (c *cluster) pods(t *testing.T) []string {
	list, err := c.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

// agent is a fake kwatch on a node: what it writes for args on the node.
type agent func(node string, args []string, stdin io.Reader, out *printer.JSON, stderr io.Writer) error

// execOf is an Exec that runs a on the pod's node, writing JSON Lines as
// kwatch there does.
func execOf(a agent) Exec {
	return func(ctx context.Context, pod *corev1.Pod, command []string, stdin io.Reader, stdout, stderr io.Writer) error {
		j := printer.NewJSON(stdout, printer.Options{AllHTTP: true, Wire: true})
		err := a(pod.Spec.NodeName, command, stdin, j, stderr)
		j.Close()
		return err
	}
}

// watching writes, for a node, a connection with a watch and n events a
// millisecond apart from at, after the start record; it ends with its
// summary and exit once its stdin closes (when wait), or at once.
func watching(n int, at map[string]time.Time, wait bool) agent {
	return func(node string, _ []string, stdin io.Reader, out *printer.JSON, stderr io.Writer) error {
		start := at[node]
		out.Emit(&record.Start{Time: start, Schema: record.SchemaVersion, Version: "test", Command: "attach", Node: node})
		fmt.Fprintf(stderr, "kwatch: attached to kube-apiserver (pid 7)\n")
		c := &record.Conn{ID: 1, Client: netip.MustParseAddrPort("10.0.0.5:40000"), Server: netip.MustParseAddrPort("10.0.0.1:6443")}
		if node == "n2" {
			c.Client = netip.MustParseAddrPort("10.0.0.6:40000")
		}
		req := &record.Request{Conn: c, Exchange: 1, Time: start, Method: "GET", Target: "/api/v1/configmaps?watch=true", Proto: "HTTP/1.1", Watch: true}
		out.Emit(req)
		out.Emit(&record.Response{Conn: c, Exchange: 1, Time: start, Proto: "HTTP/1.1", StatusCode: 200, Reason: "OK", Watch: true, Framing: "chunked", Request: req})
		for i := range n {
			out.Emit(&record.Event{Conn: c, Exchange: 1, Seq: i + 1, Time: start.Add(time.Duration(i+1) * time.Millisecond), Type: "MODIFIED",
				APIVersion: "v1", Kind: "ConfigMap", Namespace: "demo", Name: "cm", ResourceVersion: fmt.Sprint(100 + i), Object: []byte(`{}`)})
		}
		out.Flush()
		if wait {
			_, _ = io.Copy(io.Discard, stdin)
		}
		sum := &record.Summary{Time: start.Add(time.Second), Packets: 10, Connections: 1}
		if node == "n2" {
			// A filter there left connections out (--client, --port).
			sum.LeftOut = &record.LeftOut{Connections: 2}
		}
		out.Emit(sum)
		out.Emit(&record.Exit{Time: start.Add(time.Second), Code: 0})
		return nil
	}
}

// sink keeps the records handed on, as lines.
type sink struct{ lines []string }

func (s *sink) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Event:
		s.lines = append(s.lines, fmt.Sprintf("#%d %s %s rv %s", v.Conn.ID, v.Conn.Node, v.Type, v.ResourceVersion))
	case *record.Problem:
		s.lines = append(s.lines, "problem: "+v.Kind+": "+v.Detail)
	case *record.Summary:
		line := fmt.Sprintf("summary: %d nodes, %d packets, %d connections, %d versions", v.Nodes, v.Packets, v.Connections, v.Versions)
		if v.LeftOut != nil {
			line += fmt.Sprintf(", %d connections left out", v.LeftOut.Connections)
		}
		s.lines = append(s.lines, line)
	}
}

func options(c *cluster, a agent) Options {
	return Options{Client: c, Exec: execOf(a), Command: []string{"attach"}, Names: []string{"kube-apiserver"}, Profile: ProfileAttach,
		Image: "kwatch:test", PullPolicy: corev1.PullIfNotPresent, RunningTimeout: 5 * time.Second, Window: 50 * time.Millisecond}
}

// TestRunTwoNodes: kwatch runs on two nodes, their events merge in time
// order, each connection numbered and named by its node; the summary sums
// them (the connections a node's filters left out too); the pods are
// gone at the end, the namespace made once.
func TestRunTwoNodes(t *testing.T) {
	c := newCluster(linuxNode("n1"), linuxNode("n2"))
	at := map[string]time.Time{"n1": t0, "n2": t0.Add(1500 * time.Microsecond)}
	opt := options(c, watching(3, at, false))
	opt.Nodes = []string{"n1", "n2"}
	var notices []string
	opt.Notice = func(l string) { notices = append(notices, l) }
	out := &sink{}
	res, err := Run(context.Background(), opt, out)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"#1 n1 MODIFIED rv 100",
		"#1 n1 MODIFIED rv 101",
		"#2 n2 MODIFIED rv 100",
		"#1 n1 MODIFIED rv 102",
		"#2 n2 MODIFIED rv 101",
		"#2 n2 MODIFIED rv 102",
		"summary: 2 nodes, 20 packets, 2 connections, 3 versions, 2 connections left out",
	}, "\n")
	if got := strings.Join(out.lines, "\n"); got != want {
		t.Errorf("records:\n%s\nwant:\n%s", got, want)
	}
	if left := c.pods(t); len(left) != 0 {
		t.Errorf("pods left: %v", left)
	}
	if res.Cut != 0 || len(res.Nodes) != 2 || res.Nodes[0].Exit == nil || res.NodesText() != "2 nodes: n1 (exit 0), n2 (exit 0)" {
		t.Errorf("result: cut %d, %s", res.Cut, res.NodesText())
	}
	args := strings.Join(res.Nodes[0].Args, " ")
	if args != "kwatch attach --agent --agent-skip-port 10250 kube-apiserver" {
		t.Errorf("args on n1: %s", args)
	}
	joined := strings.Join(notices, "\n")
	for _, w := range []string{"made namespace kwatch (pod-security.kubernetes.io/enforce=privileged)", "node n2: attached to kube-apiserver (pid 7)",
		"node n1: pod kwatch/kwatch-n1-"} {
		if !strings.Contains(joined, w) {
			t.Errorf("notices lack %q:\n%s", w, joined)
		}
	}
}

// TestRunStreamCut: a stream that ends with no error and no exit record
// (kubernetes/kubernetes#124571) is said as a problem, in place.
func TestRunStreamCut(t *testing.T) {
	c := newCluster(linuxNode("n1"))
	opt := options(c, func(node string, _ []string, stdin io.Reader, out *printer.JSON, stderr io.Writer) error {
		out.Emit(&record.Start{Time: t0, Schema: record.SchemaVersion, Command: "attach"})
		c := &record.Conn{ID: 1, Client: netip.MustParseAddrPort("10.0.0.5:40000"), Server: netip.MustParseAddrPort("10.0.0.1:6443")}
		out.Emit(&record.Event{Conn: c, Exchange: 1, Seq: 1, Time: t0, Type: "ADDED", Name: "a", ResourceVersion: "5", Object: []byte(`{}`)})
		return nil
	})
	opt.Nodes = []string{"n1"}
	out := &sink{}
	res, err := Run(context.Background(), opt, out)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(out.lines, "\n")
	if !strings.Contains(got, "problem: node stream ended early: node n1, pod kwatch/kwatch-n1-00001: the stream ended without an error before kwatch there wrote its last record") ||
		!strings.Contains(got, "what it saw after 10:00:00.000000Z is not shown") || res.Cut != 1 {
		t.Errorf("records:\n%s\ncut %d", got, res.Cut)
	}
	if left := c.pods(t); len(left) != 0 {
		t.Errorf("pods left: %v", left)
	}
}

// TestRunDied: kwatch on the node exits with a status and no exit record
// (killed: out of memory): said with its status.
func TestRunDied(t *testing.T) {
	c := newCluster(linuxNode("n1"))
	opt := options(c, func(node string, _ []string, stdin io.Reader, out *printer.JSON, stderr io.Writer) error {
		out.Emit(&record.Start{Time: t0, Schema: record.SchemaVersion, Command: "attach"})
		return exec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137}
	})
	opt.Nodes = []string{"n1"}
	out := &sink{}
	if _, err := Run(context.Background(), opt, out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(out.lines, "\n"); !strings.Contains(got, "kwatch there exited with status 137 before its last record (Running") {
		t.Errorf("records:\n%s", got)
	}
}

// TestRunCtrlC: Ctrl-C tells kwatch on each node to end (its stdin
// closes); each writes its summary and exit, and the pods go.
func TestRunCtrlC(t *testing.T) {
	c := newCluster(linuxNode("n1"), linuxNode("n2"))
	at := map[string]time.Time{"n1": t0, "n2": t0}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 2)
	inner := watching(1, at, true)
	opt := options(c, func(node string, args []string, stdin io.Reader, out *printer.JSON, stderr io.Writer) error {
		started <- struct{}{}
		return inner(node, args, stdin, out, stderr)
	})
	opt.AllNodes = true
	go func() {
		<-started
		<-started
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	out := &sink{}
	res, err := Run(ctx, opt, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cut != 0 || res.NodesText() != "2 nodes: n1 (exit 0), n2 (exit 0)" {
		t.Errorf("cut %d, %s", res.Cut, res.NodesText())
	}
	if left := c.pods(t); len(left) != 0 {
		t.Errorf("pods left: %v", left)
	}
}

// TestRefusals: what kwatch cannot do on nodes is said in one line before
// anything is shown, and no pod is left behind.
func TestRefusals(t *testing.T) {
	windows := linuxNode("win1")
	windows.Status.NodeInfo.OperatingSystem = "windows"
	baseline := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restricted-ns", Labels: map[string]string{LabelEnforce: "baseline"}}}
	unlabelled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	noTarget := func(node string, _ []string, _ io.Reader, out *printer.JSON, _ io.Writer) error {
		if node == "n2" {
			out.Emit(&record.Start{Time: t0, Schema: record.SchemaVersion, Command: "attach"})
			out.Emit(&record.Exit{Time: t0, Code: 0})
			return nil
		}
		out.Emit(&record.Exit{Time: t0, Code: 2, Kind: record.ExitNoTarget, Message: "no such process named kube-apiserver (as pgrep -x kube-apiserver finds them)"})
		return exec.CodeExitError{Err: errors.New("exit 2"), Code: 2}
	}
	for _, tc := range []struct {
		name  string
		set   func(*cluster, *Options)
		agent agent
		want  string
	}{
		{name: "no such node", set: func(_ *cluster, o *Options) { o.Nodes = []string{"nope"} },
			want: "node nope does not exist (kubectl get nodes lists them)"},
		{name: "windows", set: func(_ *cluster, o *Options) { o.Nodes = []string{"win1"} },
			want: "node win1 runs windows: kwatch runs on Linux nodes only (eBPF, packet sockets)"},
		{name: "rbac", set: func(c *cluster, o *Options) {
			o.Nodes = []string{"n1"}
			c.deny["create pods/exec"], c.deny["delete pods"] = true, true
		}, want: "RBAC: this user may not delete pods in namespace kwatch, create pods/exec in namespace kwatch: kwatch needs them to run its pods on nodes (docs/nodes.md lists a Role and ClusterRole that grant them)"},
		{name: "rbac before anything is read", set: func(c *cluster, o *Options) {
			o.Pods = []Target{{Kind: "deployment", Namespace: "app", Name: "ctl", Arg: "deploy/ctl"}, {Kind: "pod", Namespace: "kwatch", Name: "p", Arg: "pod/p"}}
			c.deny["get deployments"], c.deny["list pods"], c.deny["get nodes"] = true, true, true
		}, want: "RBAC: this user may not get deployments.apps in namespace app, list pods in namespace app, get nodes: kwatch needs them to run its pods on nodes (docs/nodes.md lists a Role and ClusterRole that grant them)"},
		{name: "podsecurity label", set: func(_ *cluster, o *Options) { o.Nodes, o.Namespace = []string{"n1"}, "restricted-ns" },
			want: `namespace restricted-ns enforces PodSecurity "baseline:latest", which refuses kwatch's pods (host namespaces, privileged): label it privileged (kubectl label namespace restricted-ns pod-security.kubernetes.io/enforce=privileged --overwrite), or name another with --pod-namespace (violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), privileged (container "kwatch" must not set securityContext.privileged=true))`},
		{name: "podsecurity default", set: func(c *cluster, o *Options) { o.Nodes, o.Namespace, c.baseline = []string{"n1"}, "plain", true },
			want: `namespace plain enforces PodSecurity "baseline:latest", which refuses kwatch's pods (host namespaces, privileged): label it privileged (kubectl label namespace plain pod-security.kubernetes.io/enforce=privileged --overwrite), or name another with --pod-namespace (violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true), privileged (container "kwatch" must not set securityContext.privileged=true))`},
		{name: "missing namespace", set: func(_ *cluster, o *Options) { o.Nodes, o.Namespace = []string{"n1"}, "gone" },
			want: "--pod-namespace gone does not exist: make it (kubectl create namespace gone; kubectl label namespace gone pod-security.kubernetes.io/enforce=privileged), or leave --pod-namespace out for kwatch's own, kwatch"},
		{name: "image", set: func(c *cluster, o *Options) {
			o.Nodes = []string{"n1"}
			c.waiting = &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "Container image \"kwatch:test\" is not present with pull policy of Never"}
		}, want: `node n1: pod kwatch/kwatch-n1-00001 cannot get image kwatch:test (ErrImageNeverPull: Container image "kwatch:test" is not present with pull policy of Never): push kwatch's image to a registry the node pulls from (make image-push IMAGE=REGISTRY/kwatch) and give it with --image, or import it into the node's container runtime (make image; ctr -n k8s.io images import bin/kwatch-image.tar)`},
		{name: "no such process on a node named", set: func(_ *cluster, o *Options) { o.Nodes = []string{"n1", "n2"} }, agent: noTarget,
			want: "node n1: no such process named kube-apiserver (as pgrep -x kube-apiserver finds them)"},
		{name: "no such process on any node", set: func(_ *cluster, o *Options) { o.AllNodes, o.Selector = true, "role=worker" },
			agent: func(node string, args []string, in io.Reader, out *printer.JSON, e io.Writer) error {
				return noTarget("n1", args, in, out, e)
			},
			want: "no such process on any of the 2 nodes: no such process named kube-apiserver (as pgrep -x kube-apiserver finds them)"},
		{name: "ended before it began", set: func(_ *cluster, o *Options) { o.Nodes = []string{"n1"} },
			agent: func(string, []string, io.Reader, *printer.JSON, io.Writer) error {
				return errors.New(`exec: "kwatch": executable file not found in $PATH`)
			},
			want: "node n1: kwatch in pod kwatch/kwatch-n1-00001 ended before it began (exec: \"kwatch\": executable file not found in $PATH)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(linuxNode("n1"), linuxNode("n2"), windows, baseline, unlabelled)
			a := tc.agent
			if a == nil {
				a = watching(1, map[string]time.Time{}, false)
			}
			opt := options(c, a)
			tc.set(c, &opt)
			out := &sink{}
			_, err := Run(context.Background(), opt, out)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n %v\nwant:\n %s", err, tc.want)
			}
			if len(out.lines) != 0 {
				t.Errorf("records handed on: %v", out.lines)
			}
			if left := c.pods(t); len(left) != 0 {
				t.Errorf("pods left: %v", left)
			}
		})
	}
}

// TestRunAllNodesSkip: with --all-nodes a node with no such process is
// passed over quietly; the others run.
func TestRunAllNodesSkip(t *testing.T) {
	c := newCluster(linuxNode("n1"), linuxNode("n2"))
	inner := watching(1, map[string]time.Time{"n2": t0}, false)
	opt := options(c, func(node string, args []string, in io.Reader, out *printer.JSON, e io.Writer) error {
		if node == "n1" {
			out.Emit(&record.Exit{Time: t0, Code: 2, Kind: record.ExitNoTarget, Message: "no such process named kube-apiserver"})
			return exec.CodeExitError{Err: errors.New("exit 2"), Code: 2}
		}
		return inner(node, args, in, out, e)
	})
	opt.AllNodes = true
	out := &sink{}
	res, err := Run(context.Background(), opt, out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(out.lines, "\n"), "#1 n2 MODIFIED rv 100\nsummary: 1 nodes, 10 packets, 1 connections, 1 versions, 2 connections left out"; got != want {
		t.Errorf("records:\n%s", got)
	}
	if res.NodesText() != "1 node: n2 (exit 0)" {
		t.Errorf("%s", res.NodesText())
	}
}

// TestPodTargets: pod/NAME runs on the pod's node and attaches to its
// containers by their IDs; deploy/NAME to its running pods'.
func TestPodTargets(t *testing.T) {
	running := func(name, node, id string, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://" + id,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		return p
	}
	sel := map[string]string{"app": "ctl"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ctl", Namespace: "app"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}}
	c := newCluster(linuxNode("n1"), linuxNode("n2"), running("solo", "n1", "aaa", nil),
		running("ctl-1", "n1", "bbb", sel), running("ctl-2", "n2", "ccc", sel), d)
	opt := options(c, watching(0, map[string]time.Time{}, false))
	opt.Names = nil
	for _, arg := range []string{"pod/solo", "deploy/ctl"} {
		tg, ok, err := ParseTarget(arg, "app")
		if !ok || err != nil {
			t.Fatal(arg, ok, err)
		}
		opt.Pods = append(opt.Pods, tg)
	}
	res, err := Run(context.Background(), opt, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range res.Nodes {
		got = append(got, n.Node+": "+strings.Join(n.Args[2:], " "))
	}
	want := "n1: --agent --agent-skip-port 10250 --container-id aaa --container-id bbb\nn2: --agent --agent-skip-port 10250 --container-id ccc"
	if strings.Join(got, "\n") != want {
		t.Errorf("args:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
	for _, tc := range []struct{ arg, want string }{
		{"svc/x", "svc/x: kwatch attaches to pod/NAME or deploy/NAME (the processes of their containers), not svc"},
		{"pod/", "pod/: name a pod after the slash"},
	} {
		if _, _, err := ParseTarget(tc.arg, "app"); err == nil || err.Error() != tc.want {
			t.Errorf("ParseTarget(%s): %v, want %s", tc.arg, err, tc.want)
		}
	}
	if _, ok, _ := ParseTarget("kube-apiserver", "app"); ok {
		t.Error("a process name read as a pod")
	}
}

// TestPodSpec: the pod of one node, as kubectl debug makes its node pod,
// its privileges from the profile.
func TestPodSpec(t *testing.T) {
	p := PodSpec(Spec{Node: "ip-10-0-0-1.ec2.internal", Namespace: "kwatch", Image: "kwatch:v1", PullPolicy: corev1.PullIfNotPresent,
		Profile: ProfileAttach, Deadline: time.Hour, Idle: time.Minute, Run: "kwatch-0123abcd", Description: "kwatch attach kube-apiserver"})
	s := p.Spec
	c := s.Containers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"generateName", p.GenerateName == "kwatch-ip-10-0-0-1-ec2-internal-"},
		{"labels", p.Labels[LabelManagedBy] == "kwatch" && p.Labels[LabelComponent] == "node-agent" && p.Labels[LabelInstance] == "kwatch-0123abcd"},
		{"nodeName", s.NodeName == "ip-10-0-0-1.ec2.internal"},
		{"tolerations", len(s.Tolerations) == 1 && s.Tolerations[0].Operator == corev1.TolerationOpExists && s.Tolerations[0].Key == ""},
		{"restartPolicy", s.RestartPolicy == corev1.RestartPolicyNever},
		{"activeDeadlineSeconds", *s.ActiveDeadlineSeconds == 3600},
		{"host namespaces", s.HostPID && s.HostNetwork && !s.HostIPC},
		{"no token", !*s.AutomountServiceAccountToken},
		{"privileged", *c.SecurityContext.Privileged && c.SecurityContext.Capabilities == nil},
		{"image", c.Image == "kwatch:v1" && c.ImagePullPolicy == corev1.PullIfNotPresent},
		{"command", strings.Join(c.Command, " ") == "kwatch node hold --idle 1m0s"},
		{"resources", c.Resources.Requests.Memory().String() == "64Mi" && c.Resources.Limits.Memory().String() == "512Mi" && c.Resources.Limits.Cpu().IsZero()},
		{"env", len(c.Env) == 3 && c.Env[0].ValueFrom.FieldRef.FieldPath == "spec.nodeName"},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("%s: %+v", ck.what, p)
		}
	}
	cap := PodSpec(Spec{Node: "n", Profile: ProfileCapture}).Spec
	sc := cap.Containers[0].SecurityContext
	if cap.HostPID || !cap.HostNetwork || *sc.Privileged || len(sc.Capabilities.Add) != 1 || sc.Capabilities.Add[0] != "NET_RAW" || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("capture profile: %+v", cap)
	}
}

// TestClean: kwatch node clean deletes the pods that ended and the running
// ones whose holder says no kwatch runs in them (asked through exec, again
// while it says one does: a killed run's kwatch ends a moment later), and
// leaves, saying why, those where a kwatch runs (another run, now), those
// that cannot be asked, and those still starting; --force deletes them
// all.
func TestClean(t *testing.T) {
	askEvery = time.Millisecond
	defer func() { askEvery = time.Second }()
	pod := func(name string, phase corev1.PodPhase, age time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kwatch", Name: name, Labels: map[string]string{LabelManagedBy: "kwatch", LabelComponent: "node-agent"},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age))}, Status: corev1.PodStatus{Phase: phase}}
	}
	objs := func() []runtime.Object {
		return []runtime.Object{pod("ended", corev1.PodSucceeded, time.Hour), pod("idle", corev1.PodRunning, time.Hour),
			pod("ending", corev1.PodRunning, time.Hour), pod("live", corev1.PodRunning, time.Hour), pod("old", corev1.PodRunning, time.Hour),
			pod("starting", corev1.PodPending, time.Minute), pod("stuck", corev1.PodPending, time.Hour)}
	}
	asked := map[string]int{}
	exec := func(_ context.Context, p *corev1.Pod, command []string, _ io.Reader, stdout, stderr io.Writer) error {
		if strings.Join(command, " ") != "kwatch node hold --ask" {
			t.Errorf("exec %q", command)
		}
		asked[p.Name]++
		switch p.Name {
		case "idle":
			fmt.Fprintln(stdout, 0)
		case "ending": // a killed run's kwatch, gone at the second question
			fmt.Fprintln(stdout, 2-asked[p.Name])
		case "live":
			fmt.Fprintln(stdout, 1)
		case "old":
			fmt.Fprintln(stderr, "kwatch: unknown flag: --ask")
			return errors.New("command terminated with non-zero exit code: exit status 2")
		}
		return nil
	}
	c := newCluster(objs()...)
	res, err := Clean(context.Background(), c, exec, "kwatch", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.Deleted, " "); got != "kwatch/ended kwatch/ending kwatch/idle kwatch/stuck" {
		t.Errorf("deleted %s", got)
	}
	want := map[string]string{
		"kwatch/live":     "kwatch runs in it now (1 process: another run's)",
		"kwatch/old":      "its holder could not be asked whether a kwatch runs in it (kwatch: unknown flag: --ask command terminated with non-zero exit code: exit status 2)",
		"kwatch/starting": "Pending, made 1m0s ago: a run may be starting it",
	}
	if strings.Join(res.Left, " ") != "kwatch/live kwatch/old kwatch/starting" || fmt.Sprint(res.Why) != fmt.Sprint(want) {
		t.Errorf("left %v: %v\nwant %v", res.Left, res.Why, want)
	}
	if asked["live"] != askTries || asked["ending"] != 2 || asked["ended"] != 0 {
		t.Errorf("asked %v", asked)
	}
	if left := c.pods(t); strings.Join(left, " ") != "kwatch/live kwatch/old kwatch/starting" {
		t.Errorf("pods left in the cluster: %v", left)
	}
	c = newCluster(objs()...)
	if res, err = Clean(context.Background(), c, exec, "kwatch", true); err != nil || len(res.Deleted) != 7 || len(res.Left) != 0 {
		t.Errorf("--force: deleted %v, left %v, %v", res.Deleted, res.Left, err)
	}
	if left := c.pods(t); len(left) != 0 {
		t.Errorf("pods left after --force: %v", left)
	}
}
