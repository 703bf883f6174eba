package watchclient

// The policy of a live run around its list-watches: which errors of
// discovery are retried and how, what a run that ends with an error tells
// the user to check, and which error of a run stopped by another is no
// failure of its own. Run's own retries of LIST and WATCH are in loop.go.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kwatch/kwatch/pkg/record"
)

// DiscoveryBackoff returns the back-off between attempts to resolve a
// resource type: 500 ms doubling up to 30 s, with 10% jitter, without end
// (Ctrl-C ends it), as Run's LIST and WATCH back off by default.
func DiscoveryBackoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
}

// RetryableDiscovery reports whether an error of discovery may go away when
// asked again: the API server answered 429 Too Many Requests, 500 Internal
// Server Error, 503 Service Unavailable or 504 Gateway Timeout, or said the
// request timed out (a Status of reason ServerTimeout or Timeout). Every
// other error, nil included, is final.
func RetryableDiscovery(err error) bool {
	return apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// ResolveRetrying resolves arg as Resolve does, asking again after each
// error that RetryableDiscovery accepts: it emits a record.Retry (the error
// and the wait) to sink and waits the next step of b first. It returns the
// first success, the first final error, or the last error once ctx is
// done.
func (c *Client) ResolveRetrying(ctx context.Context, arg string, sink record.Sink, b wait.Backoff) (Resource, error) {
	return retry(ctx, b, sink, func(ctx context.Context) (Resource, error) { return c.Resolve(ctx, arg) })
}

// retry calls do until it succeeds, fails with an error RetryableDiscovery
// rejects, or ctx is done; before each new call it emits a record.Retry
// to sink and waits b.Step(). It returns do's last result.
func retry[T any](ctx context.Context, b wait.Backoff, sink record.Sink, do func(context.Context) (T, error)) (T, error) {
	for {
		v, err := do(ctx)
		if err == nil || ctx.Err() != nil || !RetryableDiscovery(err) {
			return v, err
		}
		d := b.Step()
		sink.Emit(&record.Retry{Time: time.Now(), Error: err.Error(), Wait: d})
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(d):
		}
	}
}

// Target says where a run connected and with what, for Explain and
// ExplainConnect to name what to check. It holds no secret.
type Target struct {
	// Proxy is the kubectl proxy gone through, e.g.
	// "http://127.0.0.1:8001"; "" for a straight connection.
	Proxy string
	// ProxyFrom says where Proxy came from when no flag gave it
	// (ConnectOptions.ProxyFrom), for the message.
	ProxyFrom string
	// Server is the API server's URL (rest.Config.Host), e.g.
	// "https://127.0.0.1:6443"; "" when no client was built.
	Server string
	// HTTP2 is set when HTTP/2 was asked for (kwatch stream --http2).
	HTTP2 bool
	// Direct is set when a flag or $KUBECONFIG asked to connect straight.
	Direct bool
	// DefaultServer reports whether Server is client-go's default rather
	// than one asked for: no kubeconfig names a cluster and no --server
	// was given. It is called only for a connection the server refused;
	// nil means false.
	DefaultServer func() bool
	// Credentials are the flags that chose the credentials, for a 401.
	Credentials Credentials
}

// Credentials are kubectl's connection flags that say whose credentials
// a run used: the names of the kubeconfig and its context as given
// ("" when not given), and whether the credential flags were given.
type Credentials struct {
	Kubeconfig, Context string
	// Token (--token), ClientCertificate (--client-certificate) and User
	// (--user) are set when the flag was given; they win over the
	// kubeconfig, in this order.
	Token, ClientCertificate, User bool
}

// String names where the credentials came from, as a 401's hint says it:
// "--token", "--client-certificate" or "--user" when given (in that
// order), else the kubeconfig context, e.g. "context dev of the kubeconfig
// /tmp/config" or "the current context of $KUBECONFIG or ~/.kube/config".
func (c Credentials) String() string {
	switch {
	case c.Token:
		return "--token"
	case c.ClientCertificate:
		return "--client-certificate"
	case c.User:
		return "--user"
	}
	where := "the current context of $KUBECONFIG or ~/.kube/config"
	if c.Kubeconfig != "" {
		where = "the kubeconfig " + c.Kubeconfig
	}
	if c.Context != "" {
		where = "context " + c.Context + " of " + where
	}
	return where
}

// ExplainConnect adds to an error of Connect what to do when it came of
// asking for HTTP/2 with nothing to connect straight with (no proxy, no
// kubeconfig flag or $KUBECONFIG); it returns other errors as they are.
func ExplainConnect(err error, t Target) error {
	if t.Proxy == "" && t.HTTP2 && !t.Direct {
		return fmt.Errorf("%w (--http2 connects straight to the API server: pass --kubeconfig)", err)
	}
	return err
}

// Explain adds to the error of a run (or of resolving what it watches)
// what to check when kwatch could not reach the API server or was refused:
// the kubectl proxy that does not answer, the server that refused the
// connection (in kubectl's words, or what to set when the server was
// client-go's default), the server that does not answer, or the
// credentials that the API server did not accept (401). Other errors are
// returned as they are.
func Explain(err error, t Target) error {
	var oe *net.OpError
	dial := errors.As(err, &oe) && oe.Op == "dial"
	switch {
	case t.Proxy != "" && dial:
		at := t.Proxy
		if t.ProxyFrom != "" {
			at += " (" + t.ProxyFrom + ")"
		}
		return fmt.Errorf("kubectl proxy at %s does not answer (%v): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight", at, oe.Err)
	case dial && errors.Is(err, syscall.ECONNREFUSED):
		host := t.Server
		if u, perr := url.Parse(t.Server); perr == nil && u.Host != "" {
			host = u.Host
		}
		if t.DefaultServer != nil && t.DefaultServer() {
			// The server was client-go's default, not one asked for:
			// what is missing first.
			if t.HTTP2 {
				return fmt.Errorf("no kubeconfig names a cluster, and --http2 connects straight to the API server, never through kubectl proxy: "+
					"set $KUBECONFIG or --kubeconfig (client-go's default server %s refused the connection)", host)
			}
			return fmt.Errorf("no kubeconfig names a cluster, and no kubectl proxy answers at %s: set $KUBECONFIG or --kubeconfig, or run \"kubectl proxy\" "+
				"(client-go's default server %s refused the connection)", DefaultProxyURL, host)
		}
		// kubectl's own words for it (k8s.io/kubectl cmd/util), capital
		// letter included.
		return errors.New("The connection to the server " + host + " was refused - did you specify the right host or port?")
	case dial:
		return fmt.Errorf("%w (the API server %s does not answer: check --server or the kubeconfig's cluster, and that this machine can reach it)", err, t.Server)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w (401: the API server did not accept the credentials of %s; check them with \"kubectl auth whoami\")", err, t.Credentials)
	}
	return err
}

// Unanswered reports whether a Run that returned err and stats ended before
// the server answered anything and before any attempt failed: no watch
// was opened (ErrOnlyRetried) and nothing was retried. Of several watches
// run together, one stopped so because another failed has not failed
// itself.
func Unanswered(err error, stats *Stats) bool {
	return errors.Is(err, ErrOnlyRetried) && stats != nil && stats.Retries == 0
}
