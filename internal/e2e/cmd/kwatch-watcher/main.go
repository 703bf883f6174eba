// Command kwatch-watcher is a client-go program that watches ConfigMaps the
// way controllers do, for kwatch attach's end-to-end tests: a shared
// informer with an event handler, and a plain Watch, both on one namespace,
// over client-go's default transport (HTTP/2 over TLS 1.3 to the API server
// of the kubeconfig). It writes no key log unless -keylog says so (README's
// key log snippet, keylog.go): kwatch attach takes the keys from the
// running process.
//
// stdout: "ready" once the informer has synced and the Watch is open, then
// one JSON line per event each of them received:
//
//	{"source":"informer"|"watch"|"rewatch","type":"ADDED"|"MODIFIED"|"DELETED","name":…,"resourceVersion":…}
//
// -tls12 keeps its connections to TLS 1.2 (the API server offers 1.3).
//
// It runs until stdin is closed (or reads EOF), then exits 0. A "rewatch"
// line on stdin stops the plain Watch and opens it again from now (its
// events then come as source "rewatch"), and prints "rewatched".
//
// -pipe-handshakes FILE: before it connects, it makes pipeCount TLS
// 1.3 handshakes with itself over net.Pipe, connections no capture can
// hold (crypto/tls derives and logs their secrets all the same, client and
// server side), and writes their client randoms to FILE, one a line, in
// hex.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kwatch/kwatch/internal/testcert"
)

type line struct {
	Source          string `json:"source"`
	Type            string `json:"type"`
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server")
	namespace := flag.String("namespace", "default", "namespace whose ConfigMaps are watched")
	waitStdin := flag.Bool("wait", false, "wait for a first line on stdin before connecting (so that kwatch attach by PID is in place first)")
	http1 := flag.Bool("http1", false, "HTTP/1.1 (ALPN http/1.1) instead of client-go's HTTP/2, and JSON instead of protobuf")
	keyLog := flag.String("keylog", "", "append the connections' TLS secrets to `FILE` (README's key log snippet)")
	server := flag.String("server", "", "connect to `HOST:PORT` instead of the kubeconfig's server, checking its certificate for the kubeconfig server's name (a relay)")
	pipes := flag.String("pipe-handshakes", "", "first make TLS handshakes with itself over net.Pipe and write their client randoms to `FILE`")
	flag.DurationVar(&crudEvery, "crud-every", 0, "every `DURATION` once ready, a GET, a LIST, a create and a delete of ConfigMaps (protobuf, on the watches' connection)")
	tls12 := flag.Bool("tls12", false, "TLS 1.2 at most (tls.Config.MaxVersion), instead of TLS 1.3")
	flag.Parse()
	if *pipes != "" {
		if err := pipeHandshakes(*pipes); err != nil {
			fmt.Fprintln(os.Stderr, "kwatch-watcher:", err)
			os.Exit(1)
		}
	}
	if err := run(*kubeconfig, *namespace, *waitStdin, *http1, *tls12, *keyLog, *server); err != nil {
		fmt.Fprintln(os.Stderr, "kwatch-watcher:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string, waitStdin, http1, tls12 bool, keyLog, server string) error {
	if waitStdin {
		var b [1]byte
		for b[0] != '\n' {
			if _, err := os.Stdin.Read(b[:]); err != nil {
				return err
			}
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	if http1 {
		cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
		cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	}
	if server != "" {
		u, err := url.Parse(cfg.Host)
		if err != nil {
			return err
		}
		if cfg.TLSClientConfig.ServerName == "" {
			cfg.TLSClientConfig.ServerName = u.Hostname()
		}
		cfg.Host = "https://" + server
	}
	if keyLog != "" {
		f, err := os.OpenFile(keyLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := withKeyLog(cfg, f); err != nil {
			return err
		}
	}
	if tls12 {
		if err := withMaxTLS12(cfg); err != nil {
			return err
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(source, typ string, obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				cm, ok = d.Obj.(*corev1.ConfigMap)
			}
			if !ok {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(line{Source: source, Type: typ, Name: cm.Name, ResourceVersion: cm.ResourceVersion})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace))
	inf := factory.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { emit("informer", "ADDED", obj) },
		UpdateFunc: func(_, obj any) { emit("informer", "MODIFIED", obj) },
		DeleteFunc: func(obj any) { emit("informer", "DELETED", obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("informer did not sync")
	}
	list, err := cs.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	// watchFrom opens the plain Watch from resourceVersion rv; its events
	// are emitted as source (the first: "watch"; later ones, opened by a
	// "rewatch" line on stdin: "rewatch").
	watchFrom := func(rv, source string) (watch.Interface, error) {
		w, err := cs.CoreV1().ConfigMaps(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, err
		}
		go func() {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted {
					emit(source, string(ev.Type), ev.Object)
				}
			}
		}()
		return w, nil
	}
	w, err := watchFrom(list.ResourceVersion, "watch")
	if err != nil {
		return err
	}
	defer func() { w.Stop() }()
	mu.Lock()
	fmt.Println("ready")
	mu.Unlock()
	if crudEvery > 0 {
		go crud(ctx, cs, namespace)
	}
	// "rewatch": the plain Watch is stopped and opened again, from now
	// (a new HTTP/2 stream on the same connection), then "rewatched".
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() != "rewatch" {
			continue
		}
		w.Stop()
		list, err := cs.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if w, err = watchFrom(list.ResourceVersion, "rewatch"); err != nil {
			return err
		}
		mu.Lock()
		fmt.Println("rewatched")
		mu.Unlock()
	}
	return nil
}

// pipeCount is how many handshakes -pipe-handshakes makes.
const pipeCount = 50

// pipeHandshakes makes pipeCount TLS 1.3 handshakes between two
// crypto/tls.Conns of this process over net.Pipe and writes their client
// randoms to path.
func pipeHandshakes(path string) error {
	cert, roots, err := testcert.NewTrusted("pipe")
	if err != nil {
		return err
	}
	var randoms strings.Builder
	for range pipeCount {
		a, b := net.Pipe()
		var kl bytes.Buffer
		client := tls.Client(a, &tls.Config{RootCAs: roots, ServerName: "pipe", KeyLogWriter: &kl, MinVersion: tls.VersionTLS13})
		server := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{cert}})
		done := make(chan error, 1)
		go func() { done <- server.Handshake() }()
		err := client.Handshake()
		if serr := <-done; err == nil {
			err = serr
		}
		a.Close()
		b.Close()
		if err != nil {
			return fmt.Errorf("a handshake over net.Pipe: %w", err)
		}
		f := strings.Fields(kl.String())
		if len(f) < 2 {
			return fmt.Errorf("a handshake over net.Pipe logged %q", kl.String())
		}
		randoms.WriteString(f[1] + "\n")
	}
	return os.WriteFile(path, []byte(randoms.String()), 0o644)
}

// crudEvery is -crud-every's: 0 for none.
var crudEvery time.Duration

// crud makes, every crudEvery until ctx ends, the requests of a controller
// that reads and writes besides its watches, on the same clientset (one
// HTTP/2 connection, protobuf): a GET of a ConfigMap that does not exist
// (404), a LIST, and a create and a delete of ConfigMap crud-N. Errors are
// ignored: the next round tries again.
func crud(ctx context.Context, cs kubernetes.Interface, namespace string) {
	cms := cs.CoreV1().ConfigMaps(namespace)
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(crudEvery):
		}
		name := fmt.Sprintf("crud-%d", n)
		_, _ = cms.Get(ctx, "crud-none", metav1.GetOptions{})
		_, _ = cms.List(ctx, metav1.ListOptions{})
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err == nil {
			_ = cms.Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
}
