package node

import (
	"context"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// NewExec returns the Exec of the cluster cfg reaches: pods/exec of the
// kwatch container, stdin, stdout and stderr each a stream of its own
// (not a terminal), over client-go's WebSocket executor (the v5 streaming
// protocol, with stdin's close), falling back to SPDY for an API server
// that does not upgrade to WebSockets, as kubectl exec does.
func NewExec(cfg *rest.Config, cs kubernetes.Interface) Exec {
	return func(ctx context.Context, pod *corev1.Pod, command []string, stdin io.Reader, stdout, stderr io.Writer) error {
		req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: ContainerName, Command: command, Stdin: true, Stdout: true, Stderr: true},
				scheme.ParameterCodec)
		ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
		if err != nil {
			return err
		}
		spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
		if err != nil {
			return err
		}
		ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return err
		}
		return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	}
}
