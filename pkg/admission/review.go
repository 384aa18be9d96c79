// Package admission decodes AdmissionReview requests and encodes responses
// for our handlers. It validates the body once and walks it (jsonscan),
// decoding only the envelope and leaving the object as raw JSON, so each
// handler decodes just the fields its decision reads; that and building JSON
// patches directly (no marshal-and-diff) keep the per-review cost well under
// controller-runtime's generic path (see pkg/mutate benchmarks).
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hopsworks/runai-webhook/pkg/internal/jsonscan"
)

// MaxReviewBytes caps a review body. The API server's own request limit is
// 3 MiB and a review carries the object and the old object, so 7 MiB holds any
// legitimate review; anything larger is refused before it is read.
const MaxReviewBytes = 7 << 20

// BodyReadTimeout bounds reading one review's body. controller-runtime's
// webhook server sets a header timeout but no read timeout, so a sender that
// stalls mid-body would hold the request, its goroutine and its buffer until
// the connection dies. The API server writes a review at once; 10 s is far
// beyond an honest sender and within its largest webhook timeout (30 s).
const BodyReadTimeout = 10 * time.Second

// bodyReadTimeout is BodyReadTimeout; tests shorten it.
var bodyReadTimeout = BodyReadTimeout

// Request is the part of an AdmissionRequest our handlers read. The json
// tags are the wire names DecodeReview reads (and what encoding/json would
// use; the tests check DecodeReview against it).
type Request struct {
	UID       string                      `json:"uid"`
	Kind      metav1.GroupVersionKind     `json:"kind"`
	Resource  metav1.GroupVersionResource `json:"resource"`
	Name      string                      `json:"name,omitempty"`
	Namespace string                      `json:"namespace,omitempty"`
	Operation string                      `json:"operation"`
	UserInfo  authnv1.UserInfo            `json:"userInfo"`
	Object    json.RawMessage             `json:"object,omitempty"`
	OldObject json.RawMessage             `json:"oldObject,omitempty"`
	DryRun    *bool                       `json:"dryRun,omitempty"`
}

// IsDryRun reports whether the API server will not persist the object.
func (r *Request) IsDryRun() bool { return r.DryRun != nil && *r.DryRun }

type review struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Request    *Request `json:"request"`
}

// Response is a handler's answer. Patch holds JSON-patch operations.
type Response struct {
	Allowed  bool
	Code     int32
	Reason   string // short machine-readable cause, used for metrics
	Message  string
	Patch    []PatchOp
	Warnings []string
}

// Allow admits with optional warnings.
func Allow(warnings ...string) Response {
	return Response{Allowed: true, Reason: "allowed", Warnings: warnings}
}

// Deny refuses with a reason (for metrics) and a message for the user.
func Deny(reason, message string, warnings ...string) Response {
	return Response{Allowed: false, Code: http.StatusForbidden, Reason: reason, Message: message, Warnings: warnings}
}

// PatchOp is one JSON-patch (RFC 6902) operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// EscapePointer escapes a map key for a JSON pointer (RFC 6901).
func EscapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return pointerEscaper.Replace(s)
}

// Handler decides one review. It must not block past ctx.
type Handler func(ctx context.Context, req *Request) Response

// Observer records each decision; metrics implement it.
type Observer interface {
	ObserveReview(webhook string, resp Response, took time.Duration)
}

// DecodeReview reads and checks an AdmissionReview body. The body is
// validated once, then walked with jsonscan: the object and old object are
// kept raw (copied) for the handler to decode just what it reads. Keys match
// exactly, as in the API server's own encoding.
func DecodeReview(body []byte) (*Request, string, error) {
	if !jsonscan.Valid(body) {
		err := json.Unmarshal(body, &struct{}{}) // encoding/json says what is wrong
		if err == nil {
			err = jsonscan.ErrMalformed
		}
		return nil, "", fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	var rv review
	if err := rv.decode(body); err != nil {
		return nil, "", fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	if rv.Kind != "AdmissionReview" {
		return nil, "", fmt.Errorf("malformed AdmissionReview: kind is %q, want AdmissionReview", rv.Kind)
	}
	if rv.APIVersion != "admission.k8s.io/v1" {
		return nil, "", fmt.Errorf("unsupported AdmissionReview version %q: only admission.k8s.io/v1 is served", rv.APIVersion)
	}
	if rv.Request == nil {
		return nil, "", errors.New("malformed AdmissionReview: no request")
	}
	if rv.Request.UID == "" {
		return nil, "", errors.New("malformed AdmissionReview: request has no uid")
	}
	return rv.Request, rv.APIVersion, nil
}

// decode reads a review from valid JSON as encoding/json would into review.
func (rv *review) decode(b []byte) error {
	if jsonscan.IsNull(b) {
		return nil
	}
	if jsonscan.Kind(b) != '{' {
		return errors.New("an AdmissionReview is a JSON object")
	}
	it := jsonscan.Object(b)
	for it.Next() {
		k, v := it.Key(), it.Value()
		var err error
		switch {
		case jsonscan.KeyIs(k, "apiVersion"):
			err = str(v, "apiVersion", &rv.APIVersion)
		case jsonscan.KeyIs(k, "kind"):
			err = str(v, "kind", &rv.Kind)
		case jsonscan.KeyIs(k, "request"):
			if jsonscan.IsNull(v) {
				rv.Request = nil
				continue
			}
			if rv.Request == nil {
				rv.Request = &Request{}
			}
			err = rv.Request.decode(v)
		}
		if err != nil {
			return err
		}
	}
	return it.Err()
}

func (r *Request) decode(b []byte) error {
	if jsonscan.Kind(b) != '{' {
		return errors.New("request: want an object")
	}
	it := jsonscan.Object(b)
	for it.Next() {
		k, v := it.Key(), it.Value()
		var err error
		switch {
		case jsonscan.KeyIs(k, "uid"):
			err = str(v, "request.uid", &r.UID)
		case jsonscan.KeyIs(k, "kind"):
			err = strFields(v, "request.kind", "group", &r.Kind.Group, "version", &r.Kind.Version, "kind", &r.Kind.Kind)
		case jsonscan.KeyIs(k, "resource"):
			err = strFields(v, "request.resource", "group", &r.Resource.Group, "version", &r.Resource.Version, "resource", &r.Resource.Resource)
		case jsonscan.KeyIs(k, "name"):
			err = str(v, "request.name", &r.Name)
		case jsonscan.KeyIs(k, "namespace"):
			err = str(v, "request.namespace", &r.Namespace)
		case jsonscan.KeyIs(k, "operation"):
			err = str(v, "request.operation", &r.Operation)
		case jsonscan.KeyIs(k, "userInfo"):
			// Small, and read only by the namespace guard: encoding/json.
			err = json.Unmarshal(v, &r.UserInfo)
		case jsonscan.KeyIs(k, "object"):
			r.Object = append(json.RawMessage(nil), v...)
		case jsonscan.KeyIs(k, "oldObject"):
			r.OldObject = append(json.RawMessage(nil), v...)
		case jsonscan.KeyIs(k, "dryRun"):
			if jsonscan.IsNull(v) {
				r.DryRun = nil
				continue
			}
			var d bool
			if d, err = jsonscan.Bool(v); err != nil {
				err = errors.New("request.dryRun: want a boolean")
				break
			}
			r.DryRun = &d
		}
		if err != nil {
			return err
		}
	}
	return it.Err()
}

// str reads a JSON string into dst; null leaves dst alone (as encoding/json).
func str(v []byte, path string, dst *string) error {
	if jsonscan.IsNull(v) {
		return nil
	}
	if jsonscan.Kind(v) != '"' {
		return fmt.Errorf("%s: want a string", path)
	}
	s, err := jsonscan.String(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	*dst = s
	return nil
}

// strFields reads an object of three string fields (a GroupVersionKind or
// GroupVersionResource).
func strFields(v []byte, path, k1 string, d1 *string, k2 string, d2 *string, k3 string, d3 *string) error {
	if jsonscan.IsNull(v) {
		return nil
	}
	if jsonscan.Kind(v) != '{' {
		return fmt.Errorf("%s: want an object", path)
	}
	it := jsonscan.Object(v)
	for it.Next() {
		var err error
		switch k := it.Key(); {
		case jsonscan.KeyIs(k, k1):
			err = str(it.Value(), path, d1)
		case jsonscan.KeyIs(k, k2):
			err = str(it.Value(), path, d2)
		case jsonscan.KeyIs(k, k3):
			err = str(it.Value(), path, d3)
		}
		if err != nil {
			return err
		}
	}
	return it.Err()
}

// EncodeResponse builds the AdmissionReview answer for req.
func EncodeResponse(uid string, resp Response) ([]byte, error) {
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: typesUID(uid), Allowed: resp.Allowed, Warnings: resp.Warnings},
	}
	if !resp.Allowed {
		code := resp.Code
		if code == 0 {
			code = http.StatusForbidden
		}
		out.Response.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: resp.Message, Reason: metav1.StatusReason(reasonFor(code))}
	}
	if resp.Allowed && len(resp.Patch) > 0 {
		patch, err := json.Marshal(resp.Patch)
		if err != nil {
			return nil, fmt.Errorf("encoding patch: %w", err)
		}
		pt := admissionv1.PatchTypeJSONPatch
		out.Response.Patch, out.Response.PatchType = patch, &pt
	}
	return json.Marshal(out)
}

func reasonFor(code int32) string {
	switch code {
	case http.StatusForbidden:
		return string(metav1.StatusReasonForbidden)
	case http.StatusServiceUnavailable:
		return string(metav1.StatusReasonServiceUnavailable)
	case http.StatusBadRequest:
		return string(metav1.StatusReasonBadRequest)
	case http.StatusTooManyRequests:
		return string(metav1.StatusReasonTooManyRequests)
	case http.StatusInternalServerError:
		return string(metav1.StatusReasonInternalError)
	}
	return ""
}

// Serve wraps h as an HTTP handler: it limits and decodes the body, bounds
// the decision by deadline, recovers from a panic in h (answering with a
// refusal rather than dropping the connection), encodes the answer and
// reports it to obs.
func Serve(name string, h Handler, deadline time.Duration, obs Observer, log logr.Logger) http.Handler {
	log = log.WithValues("webhook", name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.Method != http.MethodPost {
			http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
			return
		}
		if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
			http.Error(w, fmt.Sprintf("content type %q is not application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
			return
		}
		if r.ContentLength > MaxReviewBytes {
			// Announced too large: refuse before reading a byte.
			http.Error(w, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(start.Add(bodyReadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			log.Info("could not bound the body read", "error", err.Error())
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		// The body is in: lift the deadline so it cannot cut the answer's
		// write or the next request on a kept-alive connection.
		_ = rc.SetReadDeadline(time.Time{})
		req, _, err := DecodeReview(body)
		if err != nil {
			log.Info("refusing malformed review", "error", err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The review's own deadline, not the server's lifetime: at shutdown
		// controller-runtime cancels the base context of every request, and a
		// review in flight must finish (drain), not be refused as canceled.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), deadline)
		defer cancel()
		resp := safeCall(ctx, h, req, log)
		out, err := EncodeResponse(req.UID, resp)
		if err != nil {
			log.Error(err, "encoding response", "uid", req.UID)
			http.Error(w, "encoding response", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
		if obs != nil {
			obs.ObserveReview(name, resp, time.Since(start))
		}
		if !resp.Allowed {
			log.V(1).Info("refused", "uid", req.UID, "namespace", req.Namespace, "reason", resp.Reason, "message", resp.Message, "dryRun", req.IsDryRun())
		}
	})
}

func safeCall(ctx context.Context, h Handler, req *Request, log logr.Logger) (resp Response) {
	defer func() {
		if p := recover(); p != nil {
			log.Error(fmt.Errorf("panic: %v", p), "handler panicked", "uid", req.UID, "namespace", req.Namespace)
			resp = Response{Allowed: false, Code: http.StatusInternalServerError, Reason: "internal_error",
				Message: "runai-webhook failed to evaluate this request (internal error); retry, and report it if it persists"}
		}
	}()
	return h(ctx, req)
}
