package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
)

const podReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
 "uid":"0c2f-11","kind":{"group":"","version":"v1","kind":"Pod"},
 "resource":{"group":"","version":"v1","resource":"pods"},
 "namespace":"team-a","operation":"CREATE","userInfo":{"username":"alice","groups":["hopsworks"]},
 "object":{"metadata":{"name":"nb"},"spec":{"containers":[{"name":"c"}]}},"dryRun":true}}`

func TestDecodeReview(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string
	}{
		{"not json", `<html>`, "malformed AdmissionReview"},
		{"empty body", ``, "malformed AdmissionReview"},
		{"json array", `[1,2]`, "malformed AdmissionReview"},
		{"wrong kind", `{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{"uid":"u"}}`, `kind is "Pod", want AdmissionReview`},
		{"no kind", `{"apiVersion":"admission.k8s.io/v1","request":{"uid":"u"}}`, `kind is "", want AdmissionReview`},
		{"v1beta1 is unsupported", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`,
			`unsupported AdmissionReview version "admission.k8s.io/v1beta1": only admission.k8s.io/v1 is served`},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "no request"},
		{"null request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`, "no request"},
		{"no uid", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`, "request has no uid"},
		{"wrong type of field", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, "malformed AdmissionReview"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, version, err := DecodeReview([]byte(tt.body))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.Nil(t, req)
			assert.Empty(t, version)
		})
	}

	t.Run("valid review", func(t *testing.T) {
		req, version, err := DecodeReview([]byte(podReview))
		require.NoError(t, err)
		assert.Equal(t, "admission.k8s.io/v1", version)
		assert.Equal(t, "0c2f-11", req.UID)
		assert.Equal(t, "Pod", req.Kind.Kind)
		assert.Equal(t, "pods", req.Resource.Resource)
		assert.Equal(t, "team-a", req.Namespace)
		assert.Equal(t, "CREATE", req.Operation)
		assert.Equal(t, "alice", req.UserInfo.Username)
		assert.JSONEq(t, `{"metadata":{"name":"nb"},"spec":{"containers":[{"name":"c"}]}}`, string(req.Object))
		assert.Empty(t, req.OldObject)
		assert.True(t, req.IsDryRun())
	})
}

func TestIsDryRun(t *testing.T) {
	yes, no := true, false
	assert.False(t, (&Request{}).IsDryRun(), "absent")
	assert.False(t, (&Request{DryRun: &no}).IsDryRun())
	assert.True(t, (&Request{DryRun: &yes}).IsDryRun())
}

func TestEscapePointer(t *testing.T) {
	for in, want := range map[string]string{
		"runai/queue": "runai~1queue",
		"a~b":         "a~0b",
		"~/":          "~0~1",
		"~1":          "~01", // a literal "~1" must not be read back as "/"
		"plain":       "plain",
		"":            "",
	} {
		assert.Equal(t, want, EscapePointer(in), in)
	}
}

func decodeAnswer(t *testing.T, b []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	var rv admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(b, &rv))
	assert.Equal(t, "admission.k8s.io/v1", rv.APIVersion)
	assert.Equal(t, "AdmissionReview", rv.Kind)
	require.NotNil(t, rv.Response)
	return rv.Response
}

func TestEncodeResponse(t *testing.T) {
	patch := []PatchOp{{Op: "add", Path: "/metadata/labels/runai~1queue", Value: "team-a"}}

	t.Run("allowed with patch and warnings", func(t *testing.T) {
		b, err := EncodeResponse("u1", Response{Allowed: true, Patch: patch, Warnings: []string{"w1", "w2"}})
		require.NoError(t, err)
		r := decodeAnswer(t, b)
		assert.Equal(t, "u1", string(r.UID))
		assert.True(t, r.Allowed)
		assert.Nil(t, r.Result)
		require.NotNil(t, r.PatchType)
		assert.Equal(t, admissionv1.PatchTypeJSONPatch, *r.PatchType)
		assert.JSONEq(t, `[{"op":"add","path":"/metadata/labels/runai~1queue","value":"team-a"}]`, string(r.Patch))
		assert.Equal(t, []string{"w1", "w2"}, r.Warnings)
	})
	t.Run("allowed without patch has no patch type", func(t *testing.T) {
		b, err := EncodeResponse("u1", Allow())
		require.NoError(t, err)
		r := decodeAnswer(t, b)
		assert.True(t, r.Allowed)
		assert.Nil(t, r.Patch)
		assert.Nil(t, r.PatchType)
		assert.Empty(t, r.Warnings)
	})
	t.Run("denial never carries the patch", func(t *testing.T) {
		resp := Deny("over_quota", "no GPUs left", "w")
		resp.Patch = patch
		b, err := EncodeResponse("u2", resp)
		require.NoError(t, err)
		r := decodeAnswer(t, b)
		assert.False(t, r.Allowed)
		assert.Nil(t, r.Patch)
		assert.Nil(t, r.PatchType)
		require.NotNil(t, r.Result)
		assert.Equal(t, int32(http.StatusForbidden), r.Result.Code)
		assert.Equal(t, "Forbidden", string(r.Result.Reason))
		assert.Equal(t, "Failure", r.Result.Status)
		assert.Equal(t, "no GPUs left", r.Result.Message)
		assert.Equal(t, []string{"w"}, r.Warnings)
	})
	for _, tt := range []struct {
		code   int32
		want   int32
		reason string
	}{
		{0, 403, "Forbidden"}, // a denial without a code is a refusal
		{400, 400, "BadRequest"},
		{403, 403, "Forbidden"},
		{429, 429, "TooManyRequests"},
		{500, 500, "InternalError"},
		{503, 503, "ServiceUnavailable"},
		{418, 418, ""},
	} {
		t.Run("denial status "+http.StatusText(int(tt.want)), func(t *testing.T) {
			b, err := EncodeResponse("u3", Response{Code: tt.code, Message: "m"})
			require.NoError(t, err)
			r := decodeAnswer(t, b)
			require.NotNil(t, r.Result)
			assert.Equal(t, tt.want, r.Result.Code)
			assert.Equal(t, tt.reason, string(r.Result.Reason))
		})
	}
	t.Run("unencodable patch value is an error", func(t *testing.T) {
		_, err := EncodeResponse("u4", Response{Allowed: true, Patch: []PatchOp{{Op: "add", Path: "/x", Value: make(chan int)}}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "encoding patch")
	})
}

// recorder is an Observer for tests.
type recorder struct {
	mu    sync.Mutex
	seen  []Response
	names []string
}

func (r *recorder) ObserveReview(webhook string, resp Response, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, webhook)
	r.seen = append(r.seen, resp)
}

func post(t *testing.T, h http.Handler, contentType string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/inject", body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestServe(t *testing.T) {
	allowAll := func(context.Context, *Request) Response {
		r := Allow("hello")
		r.Patch = []PatchOp{{Op: "add", Path: "/spec/schedulerName", Value: "runai-scheduler"}}
		return r
	}

	t.Run("answers a review", func(t *testing.T) {
		obs := &recorder{}
		w := post(t, Serve("inject", allowAll, time.Second, obs, logr.Discard()), "application/json", strings.NewReader(podReview))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
		r := decodeAnswer(t, w.Body.Bytes())
		assert.Equal(t, "0c2f-11", string(r.UID))
		assert.True(t, r.Allowed)
		assert.Equal(t, []string{"hello"}, r.Warnings)
		assert.JSONEq(t, `[{"op":"add","path":"/spec/schedulerName","value":"runai-scheduler"}]`, string(r.Patch))
		assert.Equal(t, []string{"inject"}, obs.names)
	})
	t.Run("content type with charset is accepted", func(t *testing.T) {
		w := post(t, Serve("inject", allowAll, time.Second, nil, logr.Discard()), "application/json; charset=utf-8", strings.NewReader(podReview))
		assert.Equal(t, http.StatusOK, w.Code)
	})
	t.Run("wrong method", func(t *testing.T) {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			req := httptest.NewRequest(m, "/inject", strings.NewReader(podReview))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			Serve("inject", allowAll, time.Second, nil, logr.Discard()).ServeHTTP(w, req)
			assert.Equal(t, http.StatusMethodNotAllowed, w.Code, m)
		}
	})
	t.Run("wrong content type", func(t *testing.T) {
		for _, ct := range []string{"", "text/plain", "application/yaml", "application/json-patch+json", ";;;"} {
			obs := &recorder{}
			w := post(t, Serve("inject", allowAll, time.Second, obs, logr.Discard()), ct, strings.NewReader(podReview))
			assert.Equal(t, http.StatusUnsupportedMediaType, w.Code, ct)
			assert.Empty(t, obs.seen, "no decision was made")
		}
	})
	t.Run("body over MaxReviewBytes is refused without reading it all", func(t *testing.T) {
		called := false
		h := Serve("inject", func(context.Context, *Request) Response { called = true; return Allow() }, time.Second, nil, logr.Discard())
		body := &endless{limit: 4 * MaxReviewBytes}
		req := httptest.NewRequest(http.MethodPost, "/inject", body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1 // chunked: the size is not announced, so only the reader can stop it
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		assert.Contains(t, w.Body.String(), "larger than")
		assert.False(t, called)
		assert.LessOrEqual(t, body.read(), int64(MaxReviewBytes)+64<<10, "read past the limit")
	})
	t.Run("announced oversized body is refused before reading", func(t *testing.T) {
		body := &endless{limit: 2 * MaxReviewBytes}
		req := httptest.NewRequest(http.MethodPost, "/inject", body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = 2 * MaxReviewBytes
		w := httptest.NewRecorder()
		Serve("inject", allowAll, time.Second, nil, logr.Discard()).ServeHTTP(w, req)
		assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		assert.Zero(t, body.read())
	})
	t.Run("body of exactly MaxReviewBytes is read", func(t *testing.T) {
		// A valid review padded with whitespace to the limit is still served.
		padded := podReview + strings.Repeat(" ", MaxReviewBytes-len(podReview))
		w := post(t, Serve("inject", allowAll, time.Second, nil, logr.Discard()), "application/json", strings.NewReader(padded))
		assert.Equal(t, http.StatusOK, w.Code)
	})
	t.Run("malformed review", func(t *testing.T) {
		for _, body := range []string{`not json`, `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`, `{}`} {
			obs := &recorder{}
			w := post(t, Serve("inject", allowAll, time.Second, obs, logr.Discard()), "application/json", strings.NewReader(body))
			assert.Equal(t, http.StatusBadRequest, w.Code, body)
			assert.Empty(t, obs.seen)
		}
	})
	t.Run("handler panic is a 500 refusal, not a crash", func(t *testing.T) {
		obs := &recorder{}
		h := Serve("guard", func(context.Context, *Request) Response { panic("boom") }, time.Second, obs, logr.Discard())
		w := post(t, h, "application/json", strings.NewReader(podReview))
		require.Equal(t, http.StatusOK, w.Code, "the review is answered")
		r := decodeAnswer(t, w.Body.Bytes())
		assert.Equal(t, "0c2f-11", string(r.UID))
		assert.False(t, r.Allowed)
		require.NotNil(t, r.Result)
		assert.Equal(t, int32(http.StatusInternalServerError), r.Result.Code)
		assert.Contains(t, r.Result.Message, "internal error")
		assert.Contains(t, r.Result.Message, "retry")
		require.Len(t, obs.seen, 1)
		assert.Equal(t, "internal_error", obs.seen[0].Reason)

		// The server still serves after the panic.
		w = post(t, Serve("inject", allowAll, time.Second, nil, logr.Discard()), "application/json", strings.NewReader(podReview))
		assert.Equal(t, http.StatusOK, w.Code)
	})
	t.Run("deadline is applied to the handler's context", func(t *testing.T) {
		var left time.Duration
		var hasDeadline bool
		h := Serve("bind", func(ctx context.Context, _ *Request) Response {
			var dl time.Time
			dl, hasDeadline = ctx.Deadline()
			left = time.Until(dl)
			<-ctx.Done() // a handler that blocks is cut off at the deadline
			return Response{Code: http.StatusServiceUnavailable, Message: ctx.Err().Error()}
		}, 50*time.Millisecond, nil, logr.Discard())
		start := time.Now()
		w := post(t, h, "application/json", strings.NewReader(podReview))
		took := time.Since(start)
		require.True(t, hasDeadline)
		assert.LessOrEqual(t, left, 50*time.Millisecond)
		assert.Less(t, took, 5*time.Second)
		r := decodeAnswer(t, w.Body.Bytes())
		assert.False(t, r.Allowed)
		assert.Equal(t, int32(http.StatusServiceUnavailable), r.Result.Code)
		assert.Contains(t, r.Result.Message, "deadline exceeded")
	})
	t.Run("request is passed whole to the handler", func(t *testing.T) {
		var got *Request
		h := Serve("inject", func(_ context.Context, r *Request) Response { got = r; return Allow() }, time.Second, nil, logr.Discard())
		post(t, h, "application/json", bytes.NewReader([]byte(podReview)))
		require.NotNil(t, got)
		assert.Equal(t, "team-a", got.Namespace)
		assert.True(t, got.IsDryRun())
	})
}

// endless is a body of spaces up to limit, counting what was read (the
// count is read while an HTTP client may still be writing).
type endless struct {
	limit int64
	n     atomic.Int64
}

func (e *endless) Read(p []byte) (int, error) {
	read := e.n.Load()
	if read >= e.limit {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > e.limit-read {
		n = e.limit - read
	}
	for i := range p[:n] {
		p[i] = ' '
	}
	e.n.Add(n)
	return int(n), nil
}

func (e *endless) read() int64 { return e.n.Load() }

// TestServeOverHTTP serves through a real HTTP server: a review is answered,
// and a streamed body far over MaxReviewBytes is refused with 413 after at
// most the limit (plus what sits in socket buffers) was read from the client.
func TestServeOverHTTP(t *testing.T) {
	srv := httptest.NewServer(Serve("inject", func(context.Context, *Request) Response { return Allow() }, time.Second, nil, logr.Discard()))
	defer srv.Close()

	resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(podReview))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, decodeAnswer(t, b).Allowed)

	body := &endless{limit: 8 * MaxReviewBytes}
	req, err := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(body)) // no length: chunked
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err = srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	} // else the server closed the connection mid-upload, which also refuses it
	assert.Less(t, body.read(), int64(2*MaxReviewBytes), "the server stopped reading near the limit")
}

// A sender that stalls mid-body is answered (400) once the body read times
// out, over HTTP/1.1 and HTTP/2, instead of holding the request; and the
// deadline is lifted once a body is in, so a kept-alive connection serves
// the next review however long after it comes.
func TestServeBoundsTheBodyRead(t *testing.T) {
	old := bodyReadTimeout
	bodyReadTimeout = 300 * time.Millisecond
	t.Cleanup(func() { bodyReadTimeout = old })
	h := Serve("inject", func(context.Context, *Request) Response { return Allow() }, time.Second, nil, logr.Discard())

	for _, tc := range []struct {
		name  string
		http2 bool
	}{{"HTTP/1.1", false}, {"HTTP/2", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = tc.http2
			srv.StartTLS()
			t.Cleanup(srv.Close)
			hc := srv.Client()

			t.Run("stalled body", func(t *testing.T) {
				pr, pw := io.Pipe()
				t.Cleanup(func() { _ = pw.Close() })
				go func() { _, _ = pw.Write([]byte(`{"apiVersion":"admission.k8s.io/v1",`)) }() // then nothing
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/inject", pr)
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.ContentLength = int64(len(podReview))
				start := time.Now()
				resp, err := hc.Do(req)
				took := time.Since(start)
				require.NoError(t, err)
				defer resp.Body.Close()
				msg, _ := io.ReadAll(resp.Body)
				assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(msg))
				assert.Contains(t, string(msg), "reading AdmissionReview")
				assert.Less(t, took, 5*time.Second, "answered once the read timed out, not when the sender gave up")
			})
			t.Run("kept-alive connection after a slow gap", func(t *testing.T) {
				for i := range 2 {
					resp, err := hc.Post(srv.URL+"/inject", "application/json", strings.NewReader(podReview))
					require.NoError(t, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					assert.Equal(t, http.StatusOK, resp.StatusCode, "review %d", i)
					time.Sleep(2 * bodyReadTimeout) // longer than the read deadline
				}
			})
		})
	}
}
