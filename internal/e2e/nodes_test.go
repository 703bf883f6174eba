package e2e

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKwatchImageOnEachNode runs kwatch's image on every node of the stack
// as a laptop would reach them, through the API server alone (client-go with
// the admin kubeconfig): a privileged hostPID hostNetwork pod pinned to the
// node runs `kwatch version`, and its output, read back through pods/log
// (the API server asks the node's kubelet), is what the same binary prints
// here.
func TestKwatchImageOnEachNode(t *testing.T) {
	env := Cluster(t)
	nodes := env.Nodes(t)
	ref, bin := env.Image(t)
	want, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	cs := env.Clientset(t)
	ns := env.Namespace(t)
	nsObj, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	if _, err := cs.CoreV1().Namespaces().Update(context.Background(), nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		t.Run(n.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pod, err := cs.CoreV1().Pods(ns).Create(ctx, NodePod(n.Name, ref, time.Minute, "version"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("creating kwatch's pod on node %s: %v", n.Name, err)
			}
			done := env.WaitPodDone(ctx, t, ns, pod.Name)
			if done.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("pod %s on node %s: phase %s, containers %+v%s", pod.Name, n.Name, done.Status.Phase, done.Status.ContainerStatuses, fileTail(n.KubeletLog, 20))
			}
			if done.Spec.NodeName != n.Name || done.Status.HostIP != n.Name {
				t.Errorf("pod %s ran on node %q (host IP %q), want %s", pod.Name, done.Spec.NodeName, done.Status.HostIP, n.Name)
			}
			logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "kwatch"}).Stream(ctx)
			if err != nil {
				t.Fatalf("pods/log of %s: %v", pod.Name, err)
			}
			got, err := io.ReadAll(logs)
			logs.Close()
			if err != nil {
				t.Fatalf("reading pods/log of %s: %v", pod.Name, err)
			}
			if string(got) != string(want) {
				t.Errorf("kwatch version in a pod on node %s printed\n%s\nwant (the same binary here)\n%s", n.Name, got, want)
			}
			if !strings.HasPrefix(string(got), "kwatch test") {
				t.Errorf("kwatch version printed %q, want the version the test built it with (test)", got)
			}
		})
	}
}
