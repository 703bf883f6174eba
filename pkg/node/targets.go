package node

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ParseTarget reads a pod or deployment named as kubectl names them:
// pod/NAME, pods/NAME, po/NAME, deploy/NAME, deployment/NAME,
// deployments/NAME, deployment.apps/NAME; ok is false for an argument
// that is none (a process name or PID).
func ParseTarget(arg, namespace string) (t Target, ok bool, err error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return Target{}, false, nil
	}
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		t.Kind = "pod"
	case "deploy", "deployment", "deployments", "deployment.apps", "deployments.apps":
		t.Kind = "deployment"
	default:
		return Target{}, true, fmt.Errorf("%s: kwatch attaches to pod/NAME or deploy/NAME (the processes of their containers), not %s", arg, kind)
	}
	if name == "" || strings.Contains(name, "/") {
		return Target{}, true, fmt.Errorf("%s: name a %s after the slash", arg, t.Kind)
	}
	return Target{Kind: t.Kind, Namespace: namespace, Name: name, Arg: arg}, true, nil
}

// targetPods returns the running pods of t: the pod, or the deployment's
// (by its selector); each must run on a node.
func (s *session) targetPods(ctx context.Context, t Target) ([]*corev1.Pod, error) {
	pods := s.cs.CoreV1().Pods(t.Namespace)
	if t.Kind == "pod" {
		p, err := pods.Get(ctx, t.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s: no pod %s in namespace %s", t.Arg, t.Name, t.Namespace)
		}
		if err != nil {
			return nil, apiError(err, "get", "pods", t.Namespace)
		}
		if p.Status.Phase != corev1.PodRunning {
			return nil, fmt.Errorf("%s: the pod is %s, not Running: its containers have no processes to attach to", t.Arg, p.Status.Phase)
		}
		return []*corev1.Pod{p}, nil
	}
	d, err := s.cs.AppsV1().Deployments(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: no deployment %s in namespace %s", t.Arg, t.Name, t.Namespace)
	}
	if err != nil {
		return nil, apiError(err, "get", "deployments.apps", t.Namespace)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("%s: its selector: %w", t.Arg, err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, apiError(err, "list", "pods", t.Namespace)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the deployment has no running pod (of %d)", t.Arg, len(list.Items))
	}
	return out, nil
}

// containerIDs returns the IDs of pod's running containers as the
// container runtime names them (status.containerStatuses[].containerID
// without its "containerd://" or "cri-o://" scheme): what their processes'
// cgroups are named by on the node.
func containerIDs(pod *corev1.Pod) ([]string, error) {
	var ids []string
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running == nil || c.ContainerID == "" {
			continue
		}
		_, id, ok := strings.Cut(c.ContainerID, "://")
		if !ok {
			id = c.ContainerID
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("pod %s/%s: no container runs", pod.Namespace, pod.Name)
	}
	return ids, nil
}
