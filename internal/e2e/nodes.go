package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/image"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node is one of the stack's nodes: a kubelet v1.37 with its own containerd
// (and runc) on a loopback address of this machine, registered with the
// stack's API server under that address (hack/lib-node.sh).
type Node struct {
	// Name is the Node object's name, which is also its address
	// ("127.0.0.1"): the API server reaches its kubelet on Name:10250.
	Name string
	// Containerd is the unix socket of the node's containerd (CRI and
	// containerd's own API), e.g. RUN/nodes/127.0.0.1/containerd.sock.
	Containerd string
	// KubeletLog and ContainerdLog are the files the node's kubelet and
	// containerd write their logs to.
	KubeletLog, ContainerdLog string
}

// nodesReadyTimeout bounds the wait for the nodes' Ready condition: a node
// that hack/cluster-up.sh left Ready is Ready at once; one whose kubelet is
// being restarted takes a few seconds.
const nodesReadyTimeout = 2 * time.Minute

// Nodes returns the stack's nodes (the file RUN/node-names that
// hack/cluster-up.sh writes, one name a line), each checked Ready in the API
// server: a node whose kubelet does not report Ready within 2 minutes fails
// t with its kubelet's log tail. A stack that runs no node (started by an
// older hack/cluster-up.sh, or with KWATCH_NODES=none) fails t too, saying
// how to start them: end-to-end tests of kwatch on nodes must not skip.
//
// Ready means that the kubelet runs pods of every kind: the nodes have a pod
// network (a bridge with host-local addresses, no route beyond it), so they
// carry no not-ready taint. Pods reach the API server only with
// hostNetwork (it listens on 127.0.0.1); the stack publishes no
// kube-root-ca.crt ConfigMap, so a pod that mounts a service account token
// does not start: kwatch's pods set automountServiceAccountToken false.
func (e *Env) Nodes(t testing.TB) []Node {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.runDir, "node-names"))
	names := strings.Fields(string(data))
	if err != nil || len(names) == 0 {
		t.Fatalf("the stack in %s runs no nodes (no names in %s: %v): start them with hack/cluster-up.sh (KWATCH_NODES, default 127.0.0.1,127.0.0.2)",
			e.runDir, filepath.Join(e.runDir, "node-names"), err)
	}
	var nodes []Node
	for _, n := range names {
		nodes = append(nodes, Node{
			Name:          n,
			Containerd:    filepath.Join(e.runDir, "nodes", n, "containerd.sock"),
			KubeletLog:    filepath.Join(e.runDir, "kubelet-"+n+".log"),
			ContainerdLog: filepath.Join(e.runDir, "containerd-"+n+".log"),
		})
	}
	cs := e.Clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), nodesReadyTimeout)
	defer cancel()
	for _, n := range nodes {
		for {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err == nil && nodeReady(node) {
				break
			}
			if ctx.Err() != nil {
				why := "not Ready"
				if err != nil {
					why = err.Error()
				} else if c := readyCondition(node); c != nil {
					why = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
				}
				t.Fatalf("node %s is not Ready after %s: %s%s", n.Name, nodesReadyTimeout, why, fileTail(n.KubeletLog, 20))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return nodes
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	c := readyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("\n----- last lines of %s -----\n%s", path, tail(data, n))
}

var (
	imageOnce sync.Once
	imageRef  string
	imageBin  string
	imageErr  error
)

// Image returns the name of kwatch's image built from the source under test
// (the repository RepoRoot finds), imported into every node of the stack:
// kwatch built as `make build` builds it (static, CGO_ENABLED=0), in an image
// that internal/image makes as `make image` does, named by the binary's
// content ("kwatch:test-" and 12 hex digits of its SHA-256) so that test
// runs of different trees on one stack never take each other's image, and
// imported with the node's ctr into containerd's k8s.io namespace unless the
// node holds it already. Pods use it with imagePullPolicy Never. It also
// returns the path of that kwatch binary, to run here and compare.
//
// This is the stack's setup (it runs ctr as root on this machine, as a
// registry push would be elsewhere); the tests use the nodes through the API
// server only. Built once per test binary; a failure fails t. The binary
// stays in RUN/images for a day.
func (e *Env) Image(t testing.TB) (ref, kwatch string) {
	t.Helper()
	nodes := e.Nodes(t)
	imageOnce.Do(func() { imageRef, imageBin, imageErr = e.buildImage(nodes) })
	if imageErr != nil {
		t.Fatalf("kwatch's image for the nodes: %v", imageErr)
	}
	return imageRef, imageBin
}

func (e *Env) buildImage(nodes []Node) (string, string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(e.runDir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	// One test binary at a time builds and imports (go test runs the
	// packages' binaries side by side).
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", err
	}
	pruneTestBinaries(dir, 24*time.Hour)
	tmp := filepath.Join(dir, fmt.Sprintf(".kwatch-%d", os.Getpid()))
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/kwatch/kwatch/cmd.version=test", "-o", tmp, ".")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	data, err := os.ReadFile(tmp)
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(data)
	tag := "test-" + hex.EncodeToString(sum[:6])
	ref := "kwatch:" + tag
	// The binary stays beside the image it went into, for the tests to run
	// here; binaries of a day ago go (pruneTestBinaries).
	bin := filepath.Join(dir, "kwatch-"+tag)
	if err := os.Rename(tmp, bin); err != nil {
		return "", "", err
	}
	now := time.Now()
	_ = os.Chtimes(bin, now, now)
	if err := importImage(e.runDir, dir, nodes, ref, data); err != nil {
		return "", "", err
	}
	return ref, bin, nil
}

// importImage imports into the containerd of each node that does not
// hold it yet the image ref of the static program data (at
// /usr/local/bin/NAME, its entrypoint, NAME the name of ref's repository),
// as an OCI layout tarball (internal/image) written in dir, and pins it
// (io.cri-containerd.pinned) so that the kubelet's image GC keeps it.
func importImage(runDir, dir string, nodes []Node, ref string, data []byte) error {
	names, err := image.ParseName(ref)
	if err != nil {
		return err
	}
	ctr := filepath.Join(runDir, "bin", "ctr")
	var missing []Node
	for _, n := range nodes {
		out, err := exec.Command(ctr, "--address", n.Containerd, "-n", "k8s.io", "images", "ls", "-q", "name=="+names.Full).Output()
		if err != nil {
			return fmt.Errorf("node %s: %s images ls: %v", n.Name, ctr, err)
		}
		if strings.TrimSpace(string(out)) != names.Full {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	goos, goarch, err := image.ELFPlatform(data)
	if err != nil {
		return err
	}
	repo, _, _ := strings.Cut(ref, ":")
	path := "/usr/local/bin/" + filepath.Base(repo)
	img, err := image.Build(image.Spec{
		Files:        []image.File{{Path: path, Mode: 0o755, Data: data}},
		Entrypoint:   []string{path},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		OS:           goos,
		Architecture: goarch,
	})
	if err != nil {
		return err
	}
	tarPath := filepath.Join(dir, strings.NewReplacer("/", "-", ":", "-").Replace(ref)+".tar")
	if err := image.WriteLayoutFile(tarPath, img, ref); err != nil {
		return err
	}
	defer os.Remove(tarPath)
	for _, n := range missing {
		for _, args := range [][]string{
			{"images", "import", tarPath},
			{"images", "label", names.Full, "io.cri-containerd.pinned=pinned"},
		} {
			cmd := exec.Command(ctr, append([]string{"--address", n.Containerd, "-n", "k8s.io"}, args...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("node %s: ctr %s: %v\n%s", n.Name, strings.Join(args, " "), err, bytes.TrimSpace(out))
			}
		}
	}
	return nil
}

var (
	programMu     sync.Mutex
	programImages = map[string]string{}
)

// ProgramImage returns the name of an image of the Go program of package
// pkg (a path from the repository's root, e.g.
// "internal/e2e/cmd/kwatch-watcher"), built static as kwatch is, imported
// into every node of the stack as Image imports kwatch's (named NAME:test-
// and 12 hex digits of the binary's SHA-256, NAME the package's last
// element; the program at /usr/local/bin/NAME, its entrypoint): a
// controller to run in a pod, for kwatch to attach to by the pod's name.
// Built once per test binary and package; a failure fails t.
func (e *Env) ProgramImage(t testing.TB, pkg string) string {
	t.Helper()
	nodes := e.Nodes(t)
	programMu.Lock()
	defer programMu.Unlock()
	if ref, ok := programImages[pkg]; ok {
		return ref
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.runDir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./"+pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", pkg, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	ref := filepath.Base(pkg) + ":test-" + hex.EncodeToString(sum[:6])
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := importImage(e.runDir, dir, nodes, ref, data); err != nil {
		t.Fatalf("the image of %s: %v", pkg, err)
	}
	programImages[pkg] = ref
	return ref
}

// pruneTestBinaries removes the kwatch binaries Image left in dir more than
// age ago (one per tree tested).
func pruneTestBinaries(dir string, age time.Duration) {
	old, _ := filepath.Glob(filepath.Join(dir, "kwatch-test-*"))
	for _, f := range old {
		if st, err := os.Stat(f); err == nil && time.Since(st.ModTime()) > age {
			os.Remove(f)
		}
	}
}

// NodePod is the pod that kwatch runs in on a node, as `kubectl debug
// node/NAME --profile=sysadmin` makes it: pinned to the node by nodeName,
// tolerating every taint, privileged, in the host's PID and network
// namespaces, no service account token, never restarted, ended after
// deadline. Its one container "kwatch" runs image (imagePullPolicy Never:
// Image imported it) with args.
func NodePod(node, imageRef string, deadline time.Duration, args ...string) *corev1.Pod {
	privileged := true
	automount := false
	secs := int64(deadline / time.Second)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "kwatch-",
			Labels:       map[string]string{"kwatch.test/e2e": "true"},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			HostPID:                      true,
			HostNetwork:                  true,
			RestartPolicy:                corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:        &secs,
			AutomountServiceAccountToken: &automount,
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            "kwatch",
				Image:           imageRef,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
			}},
		},
	}
}

// WaitPodDone waits until the pod ns/name has ended (Succeeded or Failed)
// and returns it; it fails t when ctx ends first, with the pod's status.
func (e *Env) WaitPodDone(ctx context.Context, t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	cs := e.Clientset(t)
	var last *corev1.Pod
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				return p
			}
		}
		select {
		case <-ctx.Done():
			why := errors.New("no pod read")
			if last != nil {
				why = fmt.Errorf("phase %s, reason %q, message %q, containers %+v", last.Status.Phase, last.Status.Reason, last.Status.Message, last.Status.ContainerStatuses)
			} else if err != nil {
				why = err
			}
			t.Fatalf("pod %s/%s did not end: %v", ns, name, why)
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}
