package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// Resource bounds of the webhook's HTTPS server, in process: body size,
// per-request deadline, goroutines after a burst, and shutdown.

// podReviewJSON is an AdmissionReview of a pod CREATE in ns.
func podReviewJSON(uid, ns, name string) []byte {
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"labels":{%q:"notebook"}},"spec":{"containers":[{"name":"main","image":"registry.invalid/x:1"}]}}`,
		name, ns, typeLabel)
	return fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,"kind":{"group":"","version":"v1","kind":"Pod"},`+
		`"resource":{"group":"","version":"v1","resource":"pods"},"name":%q,"namespace":%q,"operation":"CREATE","userInfo":{"username":"e2e-bounds"},"object":%s}}`,
		uid, name, ns, pod)
}

func webhookTLS(t *testing.T) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(env.CertDir, "ca.crt"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// postReview POSTs body to path on the in-process webhook.
func postReview(ctx context.Context, hc *http.Client, path string, body []byte) (int, *admissionv1.AdmissionReview, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.WebhookURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, out)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rv); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, &rv, nil
}

// countingReader yields a review-looking body forever, counting what was
// taken, and fails once limit bytes were taken: a server that reads a
// review to its end would see that failure instead of answering.
type countingReader struct {
	n     atomic.Int64
	limit int64
}

var errReadPastLimit = errors.New("the server read past the limit")

func (r *countingReader) Read(p []byte) (int, error) {
	n := r.n.Load()
	if n >= r.limit {
		return 0, errReadPastLimit
	}
	if int64(len(p)) > r.limit-n {
		p = p[:r.limit-n]
	}
	prefix := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"big","object":{"pad":"`
	for i := range p {
		if off := n + int64(i); off < int64(len(prefix)) {
			p[i] = prefix[off]
		} else {
			p[i] = 'a'
		}
	}
	r.n.Add(int64(len(p)))
	return len(p), nil
}

// A review over admission.MaxReviewBytes gets 413, announced or streamed,
// and the server stops reading: the sender never has to produce more than
// the limit plus what the sockets buffer.
func TestBoundReviewTooLarge(t *testing.T) {
	u, err := url.Parse(env.WebhookURL)
	require.NoError(t, err)
	slack := socketBufferSlack(t)
	for _, chunked := range []bool{false, true} {
		name := "announced by Content-Length"
		if chunked {
			name = "streamed (chunked, no length)"
		}
		t.Run(name, func(t *testing.T) {
			body := &countingReader{limit: admission.MaxReviewBytes + slack}
			// A small send buffer, so what the kernel holds does not hide
			// what the server read.
			d := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
				return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10) })
			}}
			cfg := webhookTLS(t)
			cfg.ServerName = u.Hostname()
			conn, err := tls.DialWithDialer(d, "tcp", u.Host, cfg)
			require.NoError(t, err)
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
			start := time.Now()
			writeDone := make(chan error, 1)
			go func() {
				w := bufio.NewWriterSize(conn, 32<<10)
				fmt.Fprintf(w, "POST /mutate-pods-inject HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", u.Host)
				var err error
				if chunked {
					fmt.Fprintf(w, "Transfer-Encoding: chunked\r\n\r\n")
					cw := httputil.NewChunkedWriter(w)
					_, err = io.Copy(cw, body)
				} else {
					fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", body.limit)
					_, err = io.Copy(w, body)
				}
				if err == nil {
					err = w.Flush()
				}
				writeDone <- err
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err, "no answer (sent %d bytes)", body.n.Load())
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			took := time.Since(start)
			conn.Close()
			werr := <-writeDone
			sent := body.n.Load()
			t.Logf("bounds: %s: HTTP %d after %s, %d bytes produced by the sender (limit %d + %d), sender stopped by: %v; answer: %s",
				name, resp.StatusCode, took.Round(time.Millisecond), sent, admission.MaxReviewBytes, slack, werr, bytes.TrimSpace(msg))
			assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
			assert.NotErrorIs(t, werr, errReadPastLimit, "the sender had to produce more than MaxReviewBytes plus the socket buffers before the server answered")
			if !chunked {
				assert.Less(t, sent, int64(admission.MaxReviewBytes), "an announced oversize body is refused before it is read")
			}
		})
	}
}

// socketBufferSlack is how much a sender can push into loopback sockets
// that nobody reads: the receiver's buffer autotunes up to tcp_rmem's
// maximum (6 MiB by default, 32 MiB on some machines), plus our 64 KiB send
// buffer, the 32 KiB bufio writer and the 256 KiB net/http drains after a
// handler returns. A fixed 1 MiB made this test depend on the machine.
func socketBufferSlack(t *testing.T) int64 {
	rmemMax := int64(6 << 20)
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_rmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				rmemMax = v
			}
		}
	}
	slack := rmemMax + 1<<20
	t.Logf("bounds: socket slack %d bytes (tcp_rmem max %d + 1 MiB)", slack, rmemMax)
	return slack
}

// A bind blocked on a slow Run:ai answers within BindTimeout+1s with a
// refusal that says why, long before the API server's 10s timeout.
func TestBoundBindDeadline(t *testing.T) {
	skipWithoutSimulator(t)
	ns := "e2e-bounds-slow-bind"
	unboundNamespace(t, ns, "")
	env.Sim.SetLatency(20 * time.Second)
	t.Cleanup(func() { env.Sim.SetLatency(0) })
	require.NoError(t, env.Sim.SetDown(false))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: webhookTLS(t)}}
	start := time.Now()
	code, rv, err := postReview(ctxT(t, 30*time.Second), hc, app.PathBind, podReviewJSON("slow-1", ns, "first"))
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.NotNil(t, rv.Response)
	limit := env.Config.BindTimeout + time.Second
	t.Logf("bounds: bind over a 20s-slow Run:ai answered in %s (BindTimeout %s): allowed=%v %s", took.Round(time.Millisecond), env.Config.BindTimeout, rv.Response.Allowed, rv.Response.Result)
	assert.False(t, rv.Response.Allowed)
	assert.Contains(t, rv.Response.Result.Message, "not bound to Run:ai yet")
	assert.Less(t, took, limit+500*time.Millisecond, "answered within BindTimeout+1s (plus scheduling slack)")
}

// 500 reviews at once on the inject path: all answered, and the server's
// goroutines come back near their baseline once the connections close.
func TestBoundGoroutinesAfterBurst(t *testing.T) {
	ns := "e2e-bounds-burst"
	boundNamespace(t, ns)
	tr := &http.Transport{TLSClientConfig: webhookTLS(t), MaxIdleConnsPerHost: 500}
	hc := &http.Client{Timeout: 60 * time.Second, Transport: tr}
	// Warm up (TLS session, namespace cache), then the baseline.
	_, _, err := postReview(ctxT(t, 30*time.Second), hc, app.PathInject, podReviewJSON("warm", ns, "warm"))
	require.NoError(t, err)
	tr.CloseIdleConnections()
	time.Sleep(time.Second)
	runtime.GC()
	baseline := runtime.NumGoroutine()

	const n = 500
	var wg sync.WaitGroup
	var failures atomic.Int32
	var firstErr atomic.Value
	peak := atomic.Int64{}
	start := time.Now()
	ready := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			code, rv, err := postReview(context.Background(), hc, app.PathInject, podReviewJSON("burst-"+strconv.Itoa(i), ns, "p-"+strconv.Itoa(i)))
			if g := int64(runtime.NumGoroutine()); g > peak.Load() {
				peak.Store(g)
			}
			if err != nil || code != http.StatusOK || rv.Response == nil || !rv.Response.Allowed || len(rv.Response.Patch) == 0 {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("code %d err %v", code, err))
			}
		}()
	}
	close(ready)
	wg.Wait()
	burst := time.Since(start)
	tr.CloseIdleConnections()
	var after int
	settle := time.Now()
	for {
		runtime.GC()
		after = runtime.NumGoroutine()
		if after <= baseline+25 || time.Since(settle) > 20*time.Second {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("bounds: %d concurrent inject reviews in %s, %d failed (first: %v); goroutines: baseline %d, peak %d, %d after %s",
		n, burst.Round(time.Millisecond), failures.Load(), firstErr.Load(), baseline, peak.Load(), after, time.Since(settle).Round(time.Millisecond))
	assert.Zero(t, failures.Load(), "every review answered with a patch")
	assert.LessOrEqual(t, after, baseline+25, "goroutines back near the baseline once the connections closed")
}

// slowAPI delays project lists, so a bind is in flight for a while.
type slowAPI struct {
	runai.API
	delay time.Duration
}

func (s slowAPI) ListProjects(ctx context.Context, clusterID, name string) ([]runai.Project, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.API.ListProjects(ctx, clusterID, name)
}

// Shutdown lets reviews in flight finish: admission.Serve behind an
// http.Server whose Shutdown starts while a 1s review runs, and the
// webhook's own server (app.Run) stopped while a bind is in flight.
func TestBoundGracefulShutdownDrainsReviews(t *testing.T) {
	t.Run("admission.Serve under http.Server.Shutdown", func(t *testing.T) {
		started := make(chan struct{})
		h := func(ctx context.Context, req *admission.Request) admission.Response {
			close(started)
			select {
			case <-time.After(time.Second):
				return admission.Allow("waited 1s")
			case <-ctx.Done():
				return admission.Deny("cancelled", "cancelled: "+ctx.Err().Error())
			}
		}
		srv := httptest.NewServer(admission.Serve("slow", h, 5*time.Second, nil, logr.Discard()))
		defer srv.Close()
		type result struct {
			code int
			body []byte
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(podReviewJSON("drain-1", "x", "p")))
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			done <- result{resp.StatusCode, b, err}
		}()
		<-started
		shutdownStart := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Config.Shutdown(ctx))
		shutdownTook := time.Since(shutdownStart)
		r := <-done
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.code, string(r.body))
		var rv admissionv1.AdmissionReview
		require.NoError(t, json.Unmarshal(r.body, &rv))
		assert.True(t, rv.Response.Allowed, "the review in flight completed: %s", r.body)
		assert.Equal(t, []string{"waited 1s"}, rv.Response.Warnings)
		t.Logf("bounds: Shutdown waited %s for the review in flight, which answered %d allowed=%v", shutdownTook.Round(time.Millisecond), r.code, rv.Response.Allowed)
	})

	t.Run("the webhook's server (app.Run) stopped during a bind", func(t *testing.T) {
		skipWithoutSimulator(t)
		ns := "e2e-bounds-drain"
		real, err := app.NewRunAIClient(env.Config, logr.Discard())
		require.NoError(t, err)
		rc, err := env.UserConfig(framework.WebhookUser, "system:serviceaccounts", "system:serviceaccounts:"+framework.ReleaseNamespace)
		require.NoError(t, err)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		appDone := make(chan error, 1)
		go func() {
			appDone <- app.Run(ctx, app.Options{
				Config: env.Config, RestConfig: rc, Serve: true, WebhookHost: "127.0.0.1", WebhookPort: port,
				CertDir: env.CertDir, MetricsAddr: "0", HealthAddr: "0", GracefulShutdown: 10 * time.Second,
				RunAI: slowAPI{API: real, delay: 1500 * time.Millisecond}, Log: logr.Discard(),
			})
		}()
		base := "https://127.0.0.1:" + strconv.Itoa(port)
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: webhookTLS(t)}}
		require.Eventually(t, func() bool {
			resp, err := hc.Get(base + "/healthz-none")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		}, 60*time.Second, 100*time.Millisecond, "the second webhook server came up")
		// The namespace is made unbound only now: the in-process
		// controller retries a failed bind 10s later, long after this.
		unboundNamespace(t, ns, "")
		require.NoError(t, env.Sim.SetDown(false))

		type result struct {
			code int
			rv   admissionv1.AdmissionReview
			err  error
		}
		done := make(chan result, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, base+app.PathBind, bytes.NewReader(podReviewJSON("drain-bind", ns, "first")))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			var r result
			r.code = resp.StatusCode
			r.err = json.NewDecoder(resp.Body).Decode(&r.rv)
			done <- r
		}()
		time.Sleep(500 * time.Millisecond) // the bind waits on the slow project list
		require.Empty(t, getNamespace(t, ns).Labels[queueLabel], "still unbound: the bind is in flight")
		stopAt := time.Now()
		cancel()
		r := <-done
		var stopErr error
		select {
		case stopErr = <-appDone:
		case <-time.After(30 * time.Second):
			t.Fatal("app.Run did not return within 30s of its context ending")
		}
		t.Logf("bounds: app.Run returned %v %s after the stop", stopErr, time.Since(stopAt).Round(time.Millisecond))
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.code)
		require.NotNil(t, r.rv.Response)
		msg := ""
		if r.rv.Response.Result != nil {
			msg = r.rv.Response.Result.Message
		}
		t.Logf("bounds: bind in flight at shutdown answered allowed=%v %s", r.rv.Response.Allowed, msg)
		if !r.rv.Response.Allowed {
			knownBug(t, "stopping the webhook cancels the reviews in flight instead of draining them: a bind in flight at shutdown was refused with %q. "+
				"controller-runtime's webhook server uses the manager's context as every request's BaseContext, so the request context "+
				"admission.Serve derives its deadline from ends the moment the pod is told to stop (every rollout refuses the first pods "+
				"of unbound namespaces in flight). Fix: in admission.Serve derive the handler's context from context.WithoutCancel(r.Context()) "+
				"with the deadline (still bounded), or give the server a BaseContext that outlives the manager's", msg)
		}
	})
}
