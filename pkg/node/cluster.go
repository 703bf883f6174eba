package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kwatch/kwatch/pkg/phrase"
)

// plan decides the nodes to run on and what kwatch attaches to on each:
// the nodes named (each must exist and run Linux), every Linux node that
// is Ready (of Selector), and the nodes of the pods named.
func (s *session) plan(ctx context.Context) ([]*planned, error) {
	var plan []*planned
	byNode := map[string]*planned{}
	add := func(n *corev1.Node, named bool) *planned {
		p := byNode[n.Name]
		if p == nil {
			p = &planned{node: n.Name, kubeletPort: n.Status.DaemonEndpoints.KubeletEndpoint.Port, run: &NodeRun{Node: n.Name}}
			byNode[n.Name] = p
			plan = append(plan, p)
		}
		p.named = p.named || named
		return p
	}
	for _, name := range s.opt.Nodes {
		n, err := s.node(ctx, name)
		if err != nil {
			return nil, err
		}
		add(n, true).names = true
	}
	if s.opt.AllNodes || s.opt.Selector != "" {
		list, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: s.opt.Selector})
		if err != nil {
			return nil, apiError(err, "list", "nodes", "")
		}
		var notLinux, notReady []string
		for i := range list.Items {
			n := &list.Items[i]
			switch {
			case nodeOS(n) != "linux":
				notLinux = append(notLinux, n.Name)
			case !ready(n):
				notReady = append(notReady, n.Name)
			default:
				add(n, false).names = true
			}
		}
		if len(notReady) > 0 {
			s.opt.Notice(fmt.Sprintf("%s not Ready, left out: %s", phrase.Count(len(notReady), "node", "nodes"), strings.Join(notReady, ", ")))
		}
		if len(notLinux) > 0 {
			s.opt.Notice(fmt.Sprintf("%s not Linux, left out: %s", phrase.Count(len(notLinux), "node", "nodes"), strings.Join(notLinux, ", ")))
		}
		if len(list.Items) == 0 && s.opt.Selector != "" {
			return nil, fmt.Errorf("no node matches --node-selector %s", s.opt.Selector)
		}
	}
	for _, t := range s.opt.Pods {
		pods, err := s.targetPods(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, pod := range pods {
			n, err := s.node(ctx, pod.Spec.NodeName)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.Arg, err)
			}
			p := add(n, true)
			p.pods = append(p.pods, pod.Namespace+"/"+pod.Name)
			ids, err := containerIDs(pod)
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				if !slices.Contains(p.containers, id) {
					p.containers = append(p.containers, id)
				}
			}
		}
	}
	if len(plan) == 0 {
		return nil, errors.New("no Linux node that is Ready to run kwatch on")
	}
	return plan, nil
}

// node gets the node named and checks that kwatch can run there.
func (s *session) node(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := s.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %s does not exist (kubectl get nodes lists them)", name)
	}
	if err != nil {
		return nil, apiError(err, "get", "nodes", "")
	}
	if os := nodeOS(n); os != "linux" {
		return nil, fmt.Errorf("node %s runs %s: kwatch runs on Linux nodes only (eBPF, packet sockets)", name, os)
	}
	if !ready(n) {
		s.opt.Notice(fmt.Sprintf("node %s is not Ready: its pod may not start", name))
	}
	return n, nil
}

// nodeOS is the node's operating system, as its kubelet reports it (else
// its kubernetes.io/os label).
func nodeOS(n *corev1.Node) string {
	if os := n.Status.NodeInfo.OperatingSystem; os != "" {
		return os
	}
	if os := n.Labels[corev1.LabelOSStable]; os != "" {
		return os
	}
	return "an unknown operating system"
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// check is an access kwatch needs, as a SelfSubjectAccessReview asks it.
type check struct {
	verb, resource, subresource, group, namespace string
}

func (c check) String() string {
	r := c.resource
	if c.subresource != "" {
		r += "/" + c.subresource
	}
	if c.group != "" {
		r += "." + c.group
	}
	s := c.verb + " " + r
	if c.namespace != "" {
		s += " in namespace " + c.namespace
	}
	return s
}

// preflight asks the API server, before anything is read or made, whether
// this user may do what a run does (SelfSubjectAccessReview, which every
// authenticated user may ask), and refuses in one line naming each verb
// and resource missing. When the review itself cannot be asked, the run
// goes on and a refusal comes from the request refused.
func (s *session) preflight(ctx context.Context) error {
	ns := s.opt.Namespace
	checks := []check{
		{verb: "create", resource: "pods", namespace: ns},
		{verb: "get", resource: "pods", namespace: ns},
		{verb: "delete", resource: "pods", namespace: ns},
		{verb: "create", resource: "pods", subresource: "exec", namespace: ns},
	}
	for _, t := range s.opt.Pods {
		if t.Kind == "pod" {
			checks = append(checks, check{verb: "get", resource: "pods", namespace: t.Namespace})
		} else {
			checks = append(checks, check{verb: "get", resource: "deployments", group: "apps", namespace: t.Namespace},
				check{verb: "list", resource: "pods", namespace: t.Namespace})
		}
	}
	if len(s.opt.Nodes) > 0 || len(s.opt.Pods) > 0 {
		checks = append(checks, check{verb: "get", resource: "nodes"})
	}
	if s.opt.AllNodes || s.opt.Selector != "" {
		checks = append(checks, check{verb: "list", resource: "nodes"})
	}
	if s.opt.Own {
		checks = append(checks, check{verb: "get", resource: "namespaces"})
	}
	seen := map[check]bool{}
	checks = slices.DeleteFunc(checks, func(c check) bool {
		dup := seen[c]
		seen[c] = true
		return dup
	})
	missing := make([]string, len(checks))
	var wg sync.WaitGroup
	var unasked error
	var mu sync.Mutex
	for i, c := range checks {
		wg.Go(func() {
			r, err := s.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: c.verb, Resource: c.resource, Subresource: c.subresource, Group: c.group, Namespace: c.namespace}},
			}, metav1.CreateOptions{})
			if err != nil {
				mu.Lock()
				unasked = err
				mu.Unlock()
				return
			}
			if !r.Status.Allowed {
				missing[i] = c.String()
			}
		})
	}
	wg.Wait()
	if unasked != nil {
		return nil // said by the request refused, if it is
	}
	missing = slices.DeleteFunc(missing, func(s string) bool { return s == "" })
	if len(missing) > 0 {
		return fmt.Errorf("RBAC: %s may not %s: kwatch needs them to run its pods on nodes (docs/nodes.md lists a Role and ClusterRole that grant them)",
			s.whoAmI(ctx), strings.Join(missing, ", "))
	}
	return nil
}

// whoAmI names the user the API server sees (a SelfSubjectReview, as
// kubectl auth whoami asks: "user NAME"), or "this user" when it cannot
// tell.
func (s *session) whoAmI(ctx context.Context) string {
	r, err := s.cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return "this user"
	}
	return "user " + r.Status.UserInfo.Username
}

// namespace makes sure the pods' namespace is there and lets privileged
// pods in: kwatch's own is made when missing, labelled for PodSecurity
// privileged; one named with --pod-namespace must exist.
func (s *session) namespace(ctx context.Context) error {
	name := s.opt.Namespace
	// Its PodSecurity level (its label, or the cluster's default) is
	// for the admission to say, when the pods are made (createError).
	_, err := s.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && !s.opt.Own:
		return fmt.Errorf("--pod-namespace %s does not exist: make it (kubectl create namespace %s; kubectl label namespace %s %s=privileged), or leave --pod-namespace out for kwatch's own, %s",
			name, name, name, LabelEnforce, DefaultNamespace)
	case apierrors.IsNotFound(err):
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{LabelEnforce: "privileged", LabelManagedBy: "kwatch", LabelName: "kwatch"}}}
		if _, err := s.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsForbidden(err) {
				return fmt.Errorf("RBAC: this user may not create namespaces, and kwatch's namespace %s does not exist: ask for it (kubectl create namespace %s; kubectl label namespace %s %s=privileged), or name one kwatch's pods may run in with --pod-namespace",
					name, name, name, LabelEnforce)
			}
			return apiError(err, "create", "namespaces", "")
		}
		s.opt.Notice(fmt.Sprintf("made namespace %s (%s=privileged) for kwatch's pods", name, LabelEnforce))
		return nil
	case apierrors.IsForbidden(err):
		// Get may be denied where pods are allowed: the pods' creation
		// says the rest.
		return nil
	case err != nil:
		return apiError(err, "get", "namespaces", "")
	}
	return nil
}

// podSecurityError is the one line of a namespace whose PodSecurity level
// refuses kwatch's pods (host namespaces, privileged), with the fix.
func podSecurityError(ns, what string) error {
	return fmt.Errorf("namespace %s enforces %s, which refuses kwatch's pods (host namespaces, privileged): label it privileged (kubectl label namespace %s %s=privileged --overwrite), or name another with --pod-namespace",
		ns, what, ns, LabelEnforce)
}

// createError is the one line of a pod the API server refused to make.
func (s *session) createError(err error) error {
	ns := s.opt.Namespace
	msg := err.Error()
	if i := strings.Index(msg, "violates PodSecurity "); apierrors.IsForbidden(err) && i >= 0 {
		// PodSecurity admission's message (k8s.io/pod-security-admission):
		// violates PodSecurity "LEVEL:VERSION": what it forbids.
		what, _, _ := strings.Cut(msg[i+len("violates "):], ": ")
		return fmt.Errorf("%w (%s)", podSecurityError(ns, what), strings.TrimSpace(msg[i:]))
	}
	return apiError(err, "create", "pods", ns)
}

// apiError is the one line of a request the API server refused: RBAC
// names the verb and resource.
func apiError(err error, verb, resource, ns string) error {
	c := check{verb: verb, resource: resource, namespace: ns}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("RBAC: this user may not %s (%v): kwatch needs it to run its pods on nodes (docs/nodes.md lists the rules)", c, err)
	}
	return fmt.Errorf("%s: %w", c, err)
}

// leftovers deletes the pods that earlier runs left in the namespace and
// that ended (a killed kwatch: its pods end on their own, Options.Idle
// after), and says of those still running (another kwatch, now or
// killed moments ago).
func (s *session) leftovers(ctx context.Context) {
	list, err := s.cs.CoreV1().Pods(s.opt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		return
	}
	var ended []*corev1.Pod
	running := 0
	for i := range list.Items {
		p := &list.Items[i]
		if podEnded(p) {
			ended = append(ended, p)
		} else if p.DeletionTimestamp == nil {
			running++
		}
	}
	if len(ended) > 0 {
		left := deletePods(ctx, s.cs, ended)
		s.opt.Notice(fmt.Sprintf("deleted %s an earlier kwatch left, ended", phrase.Count(len(ended)-len(left), "pod", "pods")))
	}
	if running > 0 {
		s.opt.Notice(fmt.Sprintf("%s of another kwatch run in namespace %s: a kwatch's running now, or left by one killed less than a minute ago (kwatch node clean -n %s deletes those, and leaves the others)",
			phrase.Count(running, "pod", "pods"), s.opt.Namespace, s.opt.Namespace))
	}
}

// imageErrors are the waiting reasons of a container whose image the node
// cannot get (the kubelet's images package): said at once.
var imageErrors = []string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "ImageInspectError", "RegistryUnavailable"}

// waitRunning waits until pod runs its container, and says at once why it
// cannot: its image (within seconds, at the kubelet's first pull error),
// a container that could not be made, a pod the node refused.
func (s *session) waitRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.RunningTimeout)
	defer cancel()
	for {
		p, err := s.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil && ctx.Err() == nil {
			return nil, apiError(err, "get", "pods", pod.Namespace)
		}
		if err == nil {
			if why := notRunning(p, s.opt.Image); why != "" {
				return nil, fmt.Errorf("node %s: pod %s/%s %s", pod.Spec.NodeName, pod.Namespace, pod.Name, why)
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.Name == ContainerName && c.State.Running != nil {
					return p, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); errors.Is(err, context.Canceled) {
				return nil, err
			}
			state := "Pending"
			if p != nil {
				state = s.podStateOf(p)
			}
			return nil, fmt.Errorf("node %s: pod %s/%s is not running after %s (%s): kubectl describe pod -n %s %s says why; --pod-running-timeout waits longer",
				pod.Spec.NodeName, pod.Namespace, pod.Name, s.opt.RunningTimeout, state, pod.Namespace, pod.Name)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podStateOf is podState of a pod read.
func (s *session) podStateOf(p *corev1.Pod) string {
	state := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			state += ", its container waits: " + c.State.Waiting.Reason
		}
	}
	return state
}

// notRunning says why pod will not run its container, "" when it may
// still: its image cannot be had, its container cannot be made, or the
// pod ended.
func notRunning(p *corev1.Pod, image string) string {
	for _, c := range p.Status.ContainerStatuses {
		w := c.State.Waiting
		switch {
		case w != nil && slices.Contains(imageErrors, w.Reason):
			return fmt.Sprintf("cannot get image %s (%s: %s): push kwatch's image to a registry the node pulls from (make image-push IMAGE=REGISTRY/kwatch) and give it with --image, or import it into the node's container runtime (make image; ctr -n k8s.io images import bin/kwatch-image.tar)",
				image, w.Reason, oneLine(w.Message))
		case w != nil && (w.Reason == "CreateContainerConfigError" || w.Reason == "CreateContainerError" || w.Reason == "RunContainerError"):
			return fmt.Sprintf("cannot run its container (%s: %s)", w.Reason, oneLine(w.Message))
		case c.State.Terminated != nil:
			t := c.State.Terminated
			return fmt.Sprintf("ended: its container %s, exit code %d: %s", t.Reason, t.ExitCode, oneLine(t.Message))
		}
	}
	if podEnded(p) {
		return fmt.Sprintf("ended before it ran (%s: %s %s)", p.Status.Phase, p.Status.Reason, oneLine(p.Status.Message))
	}
	return ""
}

// podEnded reports whether p ended (Succeeded or Failed): its containers
// run no more.
func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// oneLine joins the lines of a message from the cluster.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Cleaned is what Clean did: the pods deleted and the pods left, each
// "namespace/name", sorted, and for each pod left why.
type Cleaned struct {
	Deleted []string
	Left    []string
	Why     map[string]string
}

// askTries bounds how many times Clean asks a pod's holder whether kwatch
// runs in it, askEvery apart, while it says one does: the kwatch of a run
// killed a moment ago ends once its stream closes, within a second.
const askTries = 5

// askEvery is the time between two questions (a variable for tests).
var askEvery = time.Second

// askTimeout bounds one question, the exec through the API server and the
// node's kubelet included.
const askTimeout = 30 * time.Second

// Clean deletes the pods kwatch ran on nodes in namespace ns ("" every
// namespace) that a kwatch left (killed before it deleted them), waits
// until they are gone, and returns what it deleted and what it left. A
// pod that ended is deleted; a running one is asked, through exec (kwatch
// node hold --ask, Hold's answer), whether a kwatch runs in it: one whose
// kwatch went away is deleted, one where a kwatch runs (another run, now)
// is left, as is one that cannot be asked (a kwatch image before the
// question) or is still starting (made less than pendingGrace ago).
// force deletes every one.
func Clean(ctx context.Context, cs kubernetes.Interface, exec Exec, ns string, force bool) (*Cleaned, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		return nil, apiError(err, "list", "pods", ns)
	}
	res := &Cleaned{Why: map[string]string{}}
	var pods []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		name := p.Namespace + "/" + p.Name
		if why := liveWhy(ctx, exec, p); why != "" && !force {
			res.Left = append(res.Left, name)
			res.Why[name] = why
			continue
		}
		pods = append(pods, p)
		res.Deleted = append(res.Deleted, name)
	}
	sort.Strings(res.Deleted)
	sort.Strings(res.Left)
	if left := deletePods(ctx, cs, pods); len(left) > 0 {
		return res, fmt.Errorf("could not delete %s: %s", phrase.Count(len(left), "pod", "pods"), strings.Join(left, "; "))
	}
	return res, nil
}

// pendingGrace is how long Clean leaves a pod that is not running yet: a
// run that starts now waits up to its --pod-running-timeout (1 minute by
// default) for it.
const pendingGrace = 5 * time.Minute

// liveWhy says why pod may belong to a kwatch running now ("" when it does
// not: it ended, or no kwatch runs in it).
func liveWhy(ctx context.Context, exec Exec, p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil, podEnded(p):
		return ""
	case p.Status.Phase != corev1.PodRunning:
		if age := time.Since(p.CreationTimestamp.Time); age < pendingGrace {
			return fmt.Sprintf("%s, made %s ago: a run may be starting it", p.Status.Phase, age.Round(time.Second))
		}
		return ""
	}
	var n int
	for try := range askTries {
		var out, errOut bytes.Buffer
		// Bounded: a node that went away must not hold the others up.
		actx, cancel := context.WithTimeout(ctx, askTimeout)
		err := exec(actx, p, []string{"kwatch", "node", "hold", "--ask"}, strings.NewReader(""), &out, &errOut)
		cancel()
		if err != nil {
			return fmt.Sprintf("its holder could not be asked whether a kwatch runs in it (%s)", oneLine(errOut.String()+" "+err.Error()))
		}
		if n, err = strconv.Atoi(strings.TrimSpace(out.String())); err != nil {
			return fmt.Sprintf("its holder's answer %q is not a count", oneLine(out.String()))
		}
		if n == 0 {
			return ""
		}
		if try < askTries-1 {
			select {
			case <-ctx.Done():
				return "interrupted while asking"
			case <-time.After(askEvery):
			}
		}
	}
	return fmt.Sprintf("kwatch runs in it now (%s: another run's)", phrase.Count(n, "process", "processes"))
}
