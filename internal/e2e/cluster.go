// Package e2e gives kwatch's end-to-end tests a real Kubernetes cluster: a
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl proxy on 127.0.0.1) and nodes (a kubelet with
// its own containerd on each of 127.0.0.1 and 127.0.0.2), started by
// hack/cluster-up.sh (see hack/lib.sh and hack/lib-node.sh for where
// binaries, logs and the kubeconfig live). Nodes, Image and NodePod run
// kwatch's image on the nodes through the API server.
//
// Tests call Cluster, which skips only under -short. Otherwise it uses the
// stack described by an env file (KUBECONFIG=… and PROXY_URL=… lines) when
// that stack answers, or starts it once per test binary with
// hack/cluster-up.sh, and fails the test with the components' log tails when
// it cannot. The package also decodes watch bodies with client-go's own
// decoders (DecodeWatchStream), as an independent ground truth for kwatch.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Env describes a running control plane.
type Env struct {
	// Kubeconfig is the absolute path of a kubeconfig that reaches
	// kube-apiserver directly over TLS with an admin bearer token.
	Kubeconfig string
	// ProxyURL is the base URL of kubectl proxy, plain HTTP without
	// authentication, e.g. "http://127.0.0.1:8001".
	ProxyURL string
	// Kubectl is the path of the kubectl built with the stack (the same
	// version as the server), or "" if it cannot be found.
	Kubectl string
	// EtcdURL is etcd's client URL (e.g. "http://127.0.0.1:2379"), for tests
	// that must act on etcd itself, such as compacting it to provoke
	// "410 Gone"; "" if it cannot be found.
	EtcdURL string

	// runDir is the folder holding the components' logs.
	runDir string
}

// Environment variables that Cluster reads.
const (
	// EnvFileVar names the env file of a running stack. hack/test.sh sets it;
	// when it is set, Cluster never starts a stack itself, and a stack that
	// does not answer fails the test.
	EnvFileVar = "KWATCH_CLUSTER_ENV"
	// RunDirVar overrides the run folder, as for hack/cluster-up.sh.
	RunDirVar = "KWATCH_CLUSTER_DIR"
)

// startTimeout bounds hack/cluster-up.sh: a cold build of kube-apiserver takes
// 5-10 minutes on 2 cores, starting takes seconds.
const startTimeout = 30 * time.Minute

var (
	once     sync.Once
	shared   *Env
	setupErr error
	// started is true if this test binary ran hack/cluster-up.sh.
	started    bool
	startedLog sync.Once
)

// Cluster returns the control plane for t. It skips t only when -short is
// given; otherwise a control plane that cannot be reached or started fails t
// (with the components' log tails), because kwatch's end-to-end tests must run
// against a real server.
//
// The stack is looked up once per test binary: the env file named by
// KWATCH_CLUSTER_ENV, else the `env` file in the default run folder
// (${KWATCH_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run}). If that
// file is missing, its proxy does not answer /readyz or its
// kube-controller-manager is not running (a stack started by an older
// hack/cluster-up.sh), and KWATCH_CLUSTER_ENV is not set, Cluster runs
// hack/cluster-up.sh from the repository root (found by walking up to
// kwatch's go.mod), which starts what is missing, and leaves the stack
// running afterwards for the next test run; stop it with
// hack/cluster-down.sh.
func Cluster(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs the control plane (hack/cluster-up.sh); skipped under -short")
	}
	once.Do(func() { shared, setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("no control plane for end-to-end tests: %v", setupErr)
	}
	if started {
		startedLog.Do(func() {
			t.Logf("ran hack/cluster-up.sh (run folder %s); the control plane stays up, stop it with hack/cluster-down.sh", shared.runDir)
		})
	}
	return shared
}

func setup() (*Env, error) {
	if path := os.Getenv(EnvFileVar); path != "" {
		env, err := readEnvFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvFileVar, path, err)
		}
		// The stack answered when hack/test.sh started it; give a slow
		// answer (a loaded machine) time before failing every test.
		err = env.ping()
		for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); err = env.ping() {
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			return nil, fmt.Errorf("%s=%s names a stack that does not answer: %w%s", EnvFileVar, path, err, env.logTails())
		}
		return env, nil
	}
	runDir, err := defaultRunDir()
	if err != nil {
		return nil, err
	}
	if env, err := readEnvFile(filepath.Join(runDir, "env")); err == nil && env.ping() == nil {
		if _, err := env.ControllerManager(); err == nil {
			return env, nil
		}
	}
	env, err := startStack()
	if err != nil {
		return nil, err
	}
	started = true
	return env, nil
}

// defaultRunDir mirrors KW_RUN_DIR in hack/lib.sh.
func defaultRunDir() (string, error) {
	if d := os.Getenv(RunDirVar); d != "" {
		return filepath.Abs(d)
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the run folder: %w", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "kwatch", "run"), nil
}

// readEnvFile parses KUBECONFIG=… and PROXY_URL=… lines; the run folder is
// the env file's folder.
func readEnvFile(path string) (*Env, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env, err := parseEnv(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	env.setRunDir(filepath.Dir(path))
	return env, nil
}

// setRunDir records the run folder and what hack/cluster-up.sh leaves in it.
func (e *Env) setRunDir(dir string) {
	e.runDir = dir
	if kubectl := filepath.Join(dir, "bin", "kubectl"); fileExists(kubectl) {
		e.Kubectl = kubectl
	}
	if data, err := os.ReadFile(filepath.Join(dir, "etcd-endpoint")); err == nil {
		e.EtcdURL = strings.TrimSpace(string(data))
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func parseEnv(data []byte) (*Env, error) {
	env := &Env{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch strings.TrimPrefix(k, "export ") {
		case "KUBECONFIG":
			env.Kubeconfig = v
		case "PROXY_URL":
			env.ProxyURL = strings.TrimRight(v, "/")
		}
	}
	if env.Kubeconfig == "" || env.ProxyURL == "" {
		return nil, errors.New("want KUBECONFIG=… and PROXY_URL=… lines")
	}
	if !filepath.IsAbs(env.Kubeconfig) {
		return nil, fmt.Errorf("KUBECONFIG=%s is not an absolute path", env.Kubeconfig)
	}
	return env, nil
}

// ping checks the whole chain: kubectl proxy, kube-apiserver (/readyz goes
// through the proxy to the server) and, behind the server, etcd.
func (e *Env) ping() error {
	if _, err := os.Stat(e.Kubeconfig); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.ProxyURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/readyz: %s: %s", e.ProxyURL, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// logTails returns the end of each component's log in the run folder, for
// error messages.
func (e *Env) logTails() string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "proxy"} {
		path := filepath.Join(e.runDir, name+".log")
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n----- last lines of %s -----\n%s", path, tail(data, 20))
	}
	return b.String()
}

func tail(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RepoRoot returns the root of the kwatch repository: the nearest folder at
// or above the working directory whose go.mod declares
// github.com/kwatch/kwatch (hack/cluster has a go.mod of its own, which is
// skipped).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && moduleLine.Match(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/kwatch/kwatch at or above the working directory")
		}
		dir = parent
	}
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+github\.com/kwatch/kwatch\s*$`)

// startStack runs hack/cluster-up.sh, streaming its progress (the build can
// take minutes) to stderr and parsing the two lines it prints on stdout.
func startStack() (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "hack", "cluster-up.sh")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	// If the timeout kills bash, do not wait for anything it left holding
	// our pipes (the components themselves redirect theirs).
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(os.Stderr, "e2e: the control plane is not (fully) running; starting what is missing with %s (a cold build takes 5-10 minutes)\n", script)
	runErr := cmd.Run()
	if ctx.Err() != nil {
		runErr = fmt.Errorf("%s did not finish within %s", script, startTimeout)
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s failed: %w\n----- its last output -----\n%s", script, runErr, tail(stderr.Bytes(), 60))
	}
	env, err := parseEnv(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s printed %q: %w", script, stdout.String(), err)
	}
	env.setRunDir(filepath.Dir(env.Kubeconfig))
	if err := env.ping(); err != nil {
		return nil, fmt.Errorf("%s succeeded but the stack does not answer: %w%s", script, err, env.logTails())
	}
	return env, nil
}

// Process is a component of the control plane, found through the pid file
// hack/cluster-up.sh wrote for it in the run folder.
type Process struct {
	// PID is its process id.
	PID int
	// Exe is the absolute path of the executable it runs, as
	// /proc/PID/exe names it: the binary in the hash-addressed cache
	// folder of hack/lib.sh.
	Exe string
	// Log is the file its stdout and stderr go to.
	Log string
}

// ControllerManagerPIDFile returns the path of the file in which
// hack/cluster-up.sh records the pid of the stack's kube-controller-manager
// (kube-controller-manager.pid in the run folder, beside its log
// kube-controller-manager.log). The file may name a process that has ended;
// ControllerManager checks.
func (e *Env) ControllerManagerPIDFile() string {
	return filepath.Join(e.runDir, "kube-controller-manager.pid")
}

// ControllerManager returns the stack's running kube-controller-manager: the
// pid in ControllerManagerPIDFile, checked as hack/lib.sh checks its pids
// (the process exists, is not a zombie and runs an executable named
// kube-controller-manager, so that a recycled pid is never taken for it). It
// returns an error if the stack runs none, e.g. one started by a
// hack/cluster-up.sh from before kube-controller-manager was part of it.
// It reads /proc, so it works on Linux only.
func (e *Env) ControllerManager() (Process, error) {
	return e.process("kube-controller-manager")
}

// process finds the component whose pid file is RUN/name.pid and whose
// executable is named name.
func (e *Env) process(name string) (Process, error) {
	pidFile := filepath.Join(e.runDir, name+".pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return Process{}, fmt.Errorf("no %s recorded: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return Process{}, fmt.Errorf("%s: %q is not a pid", pidFile, bytes.TrimSpace(data))
	}
	proc := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return Process{}, fmt.Errorf("%s (pid %d from %s) is not running: %w", name, pid, pidFile, err)
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces and parentheses.
	state := ""
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 {
			state = f[0]
		}
	}
	switch state {
	case "":
		return Process{}, fmt.Errorf("%s (pid %d from %s): cannot read the state in %s/stat", name, pid, pidFile, proc)
	case "Z", "X":
		return Process{}, fmt.Errorf("%s (pid %d from %s) has exited (state %s)", name, pid, pidFile, state)
	}
	exe, err := os.Readlink(proc + "/exe")
	if err != nil {
		return Process{}, fmt.Errorf("%s (pid %d from %s): %w", name, pid, pidFile, err)
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	if filepath.Base(exe) != name {
		return Process{}, fmt.Errorf("pid %d from %s runs %s, not %s (the pid was reused)", pid, pidFile, exe, name)
	}
	return Process{PID: pid, Exe: exe, Log: filepath.Join(e.runDir, name+".log")}, nil
}

// RESTConfig returns a client configuration for the API server from the
// kubeconfig (direct TLS connection, not through the proxy).
func (e *Env) RESTConfig(t testing.TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", e.Kubeconfig, err)
	}
	return cfg
}

// Clientset returns a typed client for the API server (see RESTConfig).
func (e *Env) Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.RESTConfig(t))
	if err != nil {
		t.Fatalf("client for %s: %v", e.Kubeconfig, err)
	}
	return cs
}

// Namespace creates a namespace with a unique name derived from t's name, so
// that tests never see each other's objects (nor those of anyone else using
// the stack), and returns its name. When t ends, the objects the tests make
// in it (ConfigMaps, Secrets, PodTemplates, custom resources are deleted
// with their CRD) and the namespace itself are deleted; kube-controller-
// manager's namespace controller then deletes the rest (its "default"
// ServiceAccount, its kube-root-ca.crt ConfigMap) and finalizes it. On a
// stack without kube-controller-manager (see ControllerManager) the test
// removes the namespace's "kubernetes" finalizer itself, as that controller
// would once the namespace is empty.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	prefix := strings.ToLower(nonDNS.ReplaceAllString(t.Name(), "-"))
	prefix = strings.Trim(prefix, "-")
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "e2e-" + prefix + "-",
		Labels:       map[string]string{"kwatch.test/e2e": "true"},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := e.Clientset(t)
	got, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace for %s: %v", t.Name(), err)
	}
	t.Cleanup(func() { e.deleteNamespace(t, cs, got.Name) })
	return got.Name
}

// deleteNamespace deletes what the tests create in ns, then ns, and
// finalizes ns if no namespace controller will.
func (e *Env) deleteNamespace(t testing.TB, cs kubernetes.Interface, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := metav1.ListOptions{}
	del := metav1.DeleteOptions{}
	errs := []error{
		cs.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, del, all),
		cs.CoreV1().Secrets(ns).DeleteCollection(ctx, del, all),
		cs.CoreV1().PodTemplates(ns).DeleteCollection(ctx, del, all),
		cs.CoreV1().Namespaces().Delete(ctx, ns, del),
	}
	if _, err := e.ControllerManager(); err != nil {
		if cur, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			cur.Spec.Finalizers = nil
			_, err = cs.CoreV1().Namespaces().Finalize(ctx, cur, metav1.UpdateOptions{})
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("cleaning up namespace %s: %v", ns, err)
	}
}

// Unique returns prefix followed by a random suffix of lower-case letters
// and digits, for names that must not meet those of another test run or of
// anyone else's objects on the same stack.
func Unique(prefix string) string {
	return prefix + strings.ToLower(rand.Text()[:8])
}

// CRD is a CustomResourceDefinition made by a test.
type CRD struct {
	// Group, Plural, Singular, Kind and Short are its names; GVR its
	// served version's resource.
	Group, Plural, Singular, Kind, Short string
	GVR                                  schema.GroupVersionResource
}

// CreateCRD creates a namespaced CustomResourceDefinition whose names are
// unique to this run (plural "w" + a random suffix, group
// "<suffix>.kwatch.test", version v1, any fields), waits until discovery
// serves it, and deletes it (with its objects) when t ends.
func (e *Env) CreateCRD(t testing.TB) CRD {
	t.Helper()
	suffix := strings.TrimPrefix(Unique("x"), "x")
	c := CRD{Group: suffix + ".kwatch.test", Plural: "widgets" + suffix, Singular: "widget" + suffix,
		Kind: "Widget" + strings.ToUpper(suffix[:1]) + suffix[1:], Short: "wdg" + suffix}
	c.GVR = schema.GroupVersionResource{Group: c.Group, Version: "v1", Resource: c.Plural}
	e.createCRD(t, c)
	return c
}

// CreateForeignCRD creates a CustomResourceDefinition with a fixed plural
// in a group of its own, as another user of the stack might have ("widgets"
// in "<random>.example.com"), and deletes it when t ends: tests must work
// with it present.
func (e *Env) CreateForeignCRD(t testing.TB, plural, kind string) CRD {
	t.Helper()
	suffix := strings.TrimPrefix(Unique("x"), "x")
	c := CRD{Group: suffix + ".example.com", Plural: plural, Singular: strings.TrimSuffix(plural, "s"), Kind: kind}
	c.GVR = schema.GroupVersionResource{Group: c.Group, Version: "v1", Resource: c.Plural}
	e.createCRD(t, c)
	return c
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (e *Env) createCRD(t testing.TB, c CRD) {
	t.Helper()
	dc, err := dynamic.NewForConfig(e.RESTConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]any{"plural": c.Plural, "singular": c.Singular, "kind": c.Kind}
	if c.Short != "" {
		names["shortNames"] = []any{c.Short}
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": c.Plural + "." + c.Group, "labels": map[string]any{"kwatch.test/e2e": "true"}},
		"spec": map[string]any{
			"group": c.Group, "scope": "Namespaced", "names": names,
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := dc.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CRD %s.%s: %v", c.Plural, c.Group, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dc.Resource(crdGVR).Delete(ctx, c.Plural+"."+c.Group, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting CRD %s.%s: %v", c.Plural, c.Group, err)
		}
	})
	// Wait for the API server to serve it: in the aggregated discovery
	// document that kubectl and kwatch read (/apis, which the server
	// updates after the group's own endpoint), and the resource itself.
	dcl := discovery.NewDiscoveryClientForConfigOrDie(e.RESTConfig(t))
	inDiscovery := func() bool {
		// Another group failing discovery (a CRD being deleted) does
		// not matter: the lists of the others are still returned.
		_, lists, _ := dcl.ServerGroupsAndResources()
		for _, l := range lists {
			if l.GroupVersion != c.Group+"/v1" {
				continue
			}
			for _, r := range l.APIResources {
				if r.Name == c.Plural {
					return true
				}
			}
		}
		return false
	}
	for {
		if inDiscovery() {
			if _, err := dc.Resource(c.GVR).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s.%s was not served within 60s", c.Plural, c.Group)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var nonDNS = regexp.MustCompile(`[^a-zA-Z0-9]+`)
