// Package e2e gives kwatch's end-to-end tests a real Kubernetes control plane:
// etcd, kube-apiserver and kubectl proxy on 127.0.0.1, started by
// hack/cluster-up.sh (see hack/lib.sh for where binaries, logs and the
// kubeconfig live).
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
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// file is missing or its proxy does not answer /readyz, and KWATCH_CLUSTER_ENV
// is not set, Cluster runs hack/cluster-up.sh from the repository root (found
// by walking up to kwatch's go.mod) and leaves the stack running afterwards
// for the next test run; stop it with hack/cluster-down.sh.
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
			t.Logf("started the control plane with hack/cluster-up.sh (run folder %s); it stays up, stop it with hack/cluster-down.sh", shared.runDir)
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
		if err := env.ping(); err != nil {
			return nil, fmt.Errorf("%s=%s names a stack that does not answer: %w%s", EnvFileVar, path, err, env.logTails())
		}
		return env, nil
	}
	runDir, err := defaultRunDir()
	if err != nil {
		return nil, err
	}
	if env, err := readEnvFile(filepath.Join(runDir, "env")); err == nil && env.ping() == nil {
		return env, nil
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
	for _, name := range []string{"etcd", "kube-apiserver", "proxy"} {
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
	fmt.Fprintf(os.Stderr, "e2e: no running control plane found; starting one with %s (a cold build takes 5-10 minutes)\n", script)
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
// that tests never see each other's objects, and returns its name. The
// namespace is not deleted afterwards: this control plane runs no
// kube-controller-manager, so a deleted namespace would stay Terminating
// forever; every hack/cluster-up.sh starts from an empty etcd instead.
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
	got, err := e.Clientset(t).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace for %s: %v", t.Name(), err)
	}
	return got.Name
}

var nonDNS = regexp.MustCompile(`[^a-zA-Z0-9]+`)
