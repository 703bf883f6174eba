package watchclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kwatch/kwatch/pkg/record"
)

var cmGroup = schema.GroupResource{Resource: "configmaps"}

func TestRetryableDiscovery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"429", apierrors.NewTooManyRequests("slow down", 1), true},
		{"500", apierrors.NewInternalError(errors.New("boom")), true},
		{"503", apierrors.NewServiceUnavailable("starting"), true},
		{"504 server timeout", apierrors.NewServerTimeout(cmGroup, "list", 1), true},
		{"timeout", apierrors.NewTimeoutError("took too long", 1), true},
		{"401", apierrors.NewUnauthorized("who are you"), false},
		{"403", apierrors.NewForbidden(cmGroup, "", errors.New("no")), false},
		{"404", apierrors.NewNotFound(cmGroup, "x"), false},
		{"dial", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{"wrapped 503", fmt.Errorf("configmaps: %w", apierrors.NewServiceUnavailable("starting")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RetryableDiscovery(tc.err); got != tc.want {
				t.Errorf("RetryableDiscovery(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestDiscoveryBackoff(t *testing.T) {
	t.Parallel()
	b := DiscoveryBackoff()
	if b.Duration != 500*time.Millisecond || b.Factor != 2 || b.Jitter != 0.1 || b.Cap != 30*time.Second || b.Steps != 1<<30 {
		t.Errorf("DiscoveryBackoff() = %+v", b)
	}
	b.Jitter = 0
	var got []time.Duration
	for range 8 {
		got = append(got, b.Step())
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("steps %v, want %v", got, want)
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	unavailable := apierrors.NewServiceUnavailable("etcd is starting")
	notFound := apierrors.NewNotFound(cmGroup, "x")
	for _, tc := range []struct {
		name string
		// errs are the results of the calls, one each; past its end a
		// call succeeds.
		errs []error
		// cancelAfter cancels the context after this many calls (0: never).
		cancelAfter int
		wantCalls   int
		wantErr     error
		wantWaits   []time.Duration
	}{
		{name: "first call succeeds", wantCalls: 1},
		{name: "two 503s, then success", errs: []error{unavailable, unavailable}, wantCalls: 3,
			wantWaits: []time.Duration{time.Millisecond, 2 * time.Millisecond}},
		{name: "final error at once", errs: []error{notFound}, wantCalls: 1, wantErr: notFound},
		{name: "503, then a final error", errs: []error{unavailable, notFound}, wantCalls: 2, wantErr: notFound,
			wantWaits: []time.Duration{time.Millisecond}},
		{name: "cancelled while failing", errs: []error{unavailable, unavailable, unavailable}, cancelAfter: 2, wantCalls: 2,
			wantErr: unavailable, wantWaits: []time.Duration{time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var retries []*record.Retry
			sink := record.SinkFunc(func(r record.Record) { retries = append(retries, r.(*record.Retry)) })
			calls := 0
			b := wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 100}
			got, err := retry(ctx, b, sink, func(context.Context) (int, error) {
				calls++
				if calls == tc.cancelAfter {
					cancel()
				}
				if calls <= len(tc.errs) {
					return 0, tc.errs[calls-1]
				}
				return 42, nil
			})
			if calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
			if err != tc.wantErr {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if err == nil && got != 42 {
				t.Errorf("value %d, want 42", got)
			}
			if len(retries) != len(tc.wantWaits) {
				t.Fatalf("%d retry records, want %d", len(retries), len(tc.wantWaits))
			}
			for i, r := range retries {
				if r.Wait != tc.wantWaits[i] || r.Error != unavailable.Error() || r.Time.IsZero() {
					t.Errorf("retry %d: %+v, want wait %v, error %q", i, r, tc.wantWaits[i], unavailable.Error())
				}
			}
		})
	}
}

func TestCredentialsString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    Credentials
		want string
	}{
		{"nothing given", Credentials{}, "the current context of $KUBECONFIG or ~/.kube/config"},
		{"kubeconfig", Credentials{Kubeconfig: "/tmp/config"}, "the kubeconfig /tmp/config"},
		{"context", Credentials{Context: "dev"}, "context dev of the current context of $KUBECONFIG or ~/.kube/config"},
		{"kubeconfig and context", Credentials{Kubeconfig: "/tmp/config", Context: "dev"}, "context dev of the kubeconfig /tmp/config"},
		{"token wins", Credentials{Kubeconfig: "/tmp/config", Token: true, ClientCertificate: true, User: true}, "--token"},
		{"client certificate before user", Credentials{ClientCertificate: true, User: true}, "--client-certificate"},
		{"user", Credentials{Context: "dev", User: true}, "--user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.c.String(); got != tc.want {
				t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
			}
		})
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()
	refused := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	unreachable := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}}
	unauthorized := apierrors.NewUnauthorized("Unauthorized")
	yes := func() bool { return true }
	no := func() bool { return false }
	for _, tc := range []struct {
		name string
		err  error
		t    Target
		want string
	}{
		{"proxy does not answer", refused, Target{Proxy: "http://127.0.0.1:8001", Server: "http://127.0.0.1:8001"},
			"kubectl proxy at http://127.0.0.1:8001 does not answer (connection refused): is it running? Start it with \"kubectl proxy\", or pass --kubeconfig to connect straight"},
		{"refused, in kubectl's words", refused, Target{Server: "https://10.0.0.1:6443", DefaultServer: no},
			"The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?"},
		{"refused, no DefaultServer func", refused, Target{Server: "https://10.0.0.1:6443"},
			"The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?"},
		{"refused, server not a URL", refused, Target{Server: "10.0.0.1:6443"},
			"The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?"},
		{"refused, client-go's default", refused, Target{Server: "http://localhost:8080", DefaultServer: yes},
			"no kubeconfig names a cluster, and no kubectl proxy answers at http://127.0.0.1:8001: set $KUBECONFIG or --kubeconfig, or run \"kubectl proxy\" " +
				"(client-go's default server localhost:8080 refused the connection)"},
		{"refused, client-go's default, --http2", refused, Target{Server: "http://localhost:8080", DefaultServer: yes, HTTP2: true},
			"no kubeconfig names a cluster, and --http2 connects straight to the API server, never through kubectl proxy: " +
				"set $KUBECONFIG or --kubeconfig (client-go's default server localhost:8080 refused the connection)"},
		{"server does not answer", unreachable, Target{Server: "https://10.0.0.1:6443", DefaultServer: yes},
			"Get \"https://10.0.0.1:6443/api\": dial tcp: i/o timeout (the API server https://10.0.0.1:6443 does not answer: check --server or the kubeconfig's cluster, and that this machine can reach it)"},
		{"401", fmt.Errorf("watch /api/v1/configmaps: %w", unauthorized), Target{Server: "https://10.0.0.1:6443", Credentials: Credentials{Kubeconfig: "/tmp/config"}},
			"watch /api/v1/configmaps: Unauthorized (401: the API server did not accept the credentials of the kubeconfig /tmp/config; check them with \"kubectl auth whoami\")"},
		{"401 through a proxy", unauthorized, Target{Proxy: "http://127.0.0.1:8001", Credentials: Credentials{Token: true}},
			"Unauthorized (401: the API server did not accept the credentials of --token; check them with \"kubectl auth whoami\")"},
		{"403 as it is", apierrors.NewForbidden(cmGroup, "", errors.New("no")), Target{Server: "https://10.0.0.1:6443"},
			"configmaps is forbidden: no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Explain(tc.err, tc.t)
			if got.Error() != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if err := Explain(unreachable, Target{}); !errors.Is(err, unreachable) {
		t.Errorf("%v does not wrap %v", err, unreachable)
	}
	if err := Explain(unauthorized, Target{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("%v does not wrap the 401", err)
	}
}

func TestExplainConnect(t *testing.T) {
	t.Parallel()
	base := errors.New("invalid configuration: no configuration has been provided")
	for _, tc := range []struct {
		name string
		t    Target
		want string
	}{
		{"--http2 with nothing to connect straight with", Target{HTTP2: true}, base.Error() + " (--http2 connects straight to the API server: pass --kubeconfig)"},
		{"--http2 with --kubeconfig", Target{HTTP2: true, Direct: true}, base.Error()},
		{"--http2 through a proxy", Target{HTTP2: true, Proxy: "http://127.0.0.1:8001"}, base.Error()},
		{"HTTP/1.1", Target{}, base.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ExplainConnect(base, tc.t)
			if got.Error() != tc.want || !errors.Is(got, base) {
				t.Errorf("got %q, want %q (wrapping the error)", got, tc.want)
			}
		})
	}
}

func TestUnanswered(t *testing.T) {
	t.Parallel()
	interrupted := fmt.Errorf("%w: no watch was opened: interrupted before the server answered", ErrOnlyRetried)
	for _, tc := range []struct {
		name  string
		err   error
		stats *Stats
		want  bool
	}{
		{"stopped before any answer", interrupted, &Stats{Watches: 1}, true},
		{"stopped after retries", interrupted, &Stats{Watches: 3, Retries: 2}, false},
		{"no stats", interrupted, nil, false},
		{"an error of its own", apierrors.NewNotFound(cmGroup, "x"), &Stats{Watches: 1}, false},
		{"no error", nil, &Stats{Watches: 1, Opened: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Unanswered(tc.err, tc.stats); got != tc.want {
				t.Errorf("Unanswered(%v, %+v) = %v, want %v", tc.err, tc.stats, got, tc.want)
			}
		})
	}
}
