package gpuview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Paths of the views. The handler is registered under PathPrefix on the
// webhook's HTTPS server.
const (
	PathPrefix = "/api/v1/"
	PathAdmin  = "/api/v1/admin/runai"
)

// NamespacePath is the path of namespace ns's GPU view.
func NamespacePath(ns string) string { return "/api/v1/namespaces/" + ns + "/gpu" }

// ForwardedAuthorizationHeader carries the caller's "Bearer <token>" when
// the request comes through the API server's service proxy: the API server
// removes Authorization once it has authenticated the caller, so the CLI
// repeats the token here. It is checked exactly like Authorization, which
// wins when both are present.
const ForwardedAuthorizationHeader = "X-Runai-Webhook-Authorization"

// DefaultTimeout bounds one request (Kubernetes and Run:ai reads included).
const DefaultTimeout = 10 * time.Second

// Deps are what the handler needs.
type Deps struct {
	Service       *Service
	Authenticator Authenticator
	Authorizer    Authorizer
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	Log     logr.Logger
}

// ErrorBody is the JSON of every non-200 answer.
type ErrorBody struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type handler struct {
	d Deps
}

// NewHandler serves
//
//	GET /api/v1/namespaces/{ns}/gpu  (get gpuavailability in ns)
//	GET /api/v1/admin/runai          (cluster-wide get runaiadmin)
//
// with JSON bodies. Every request is authenticated (401 without a valid
// bearer token) and authorized (403) before anything about a namespace is
// read, so a caller learns whether a namespace exists (404) only when
// allowed to see its view. Only GET is served (405).
func NewHandler(d Deps) http.Handler {
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	h := &handler{d: d}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/namespaces/{ns}/gpu", h.namespace)
	mux.HandleFunc(PathAdmin, h.admin)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no view at %s; the views are GET %s and GET %s", r.URL.Path, NamespacePath("{namespace}"), PathAdmin))
	})
	return mux
}

func (h *handler) namespace(w http.ResponseWriter, r *http.Request) {
	if !allowGET(w, r) {
		return
	}
	ns := r.PathValue("ns")
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a namespace name: %s", ns, strings.Join(errs, "; ")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.d.Timeout)
	defer cancel()
	u, ok := h.access(ctx, w, r, Access{Verb: "get", Resource: ResourceGPUAvailability, Namespace: ns})
	if !ok {
		return
	}
	view, err := h.d.Service.Namespace(ctx, ns)
	if err != nil {
		h.fail(w, r, u, err)
		return
	}
	h.d.Log.V(1).Info("GPU view", "namespace", ns, "user", u.Name, "status", view.Status)
	writeJSON(w, http.StatusOK, view)
}

func (h *handler) admin(w http.ResponseWriter, r *http.Request) {
	if !allowGET(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.d.Timeout)
	defer cancel()
	u, ok := h.access(ctx, w, r, Access{Verb: "get", Resource: ResourceRunAIAdmin})
	if !ok {
		return
	}
	view, err := h.d.Service.Admin(ctx)
	if err != nil {
		h.fail(w, r, u, err)
		return
	}
	h.d.Log.V(1).Info("admin view", "user", u.Name, "status", view.Status)
	writeJSON(w, http.StatusOK, view)
}

// access authenticates and authorizes the request; on false the answer is written.
func (h *handler) access(ctx context.Context, w http.ResponseWriter, r *http.Request, a Access) (User, bool) {
	token, ok := BearerToken(r.Header)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="runai-webhook"`)
		writeError(w, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <Kubernetes token>)")
		return User{}, false
	}
	u, ok, err := h.d.Authenticator.Authenticate(ctx, token)
	if err != nil {
		h.d.Log.Info("cannot check a token", "error", err.Error())
		writeError(w, http.StatusServiceUnavailable, "the token could not be checked with the Kubernetes API: "+err.Error())
		return User{}, false
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="runai-webhook", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "the bearer token is not valid")
		return User{}, false
	}
	allowed, reason, err := h.d.Authorizer.Authorize(ctx, u, a)
	if err != nil {
		h.d.Log.Info("cannot check access", "user", u.Name, "error", err.Error())
		writeError(w, http.StatusServiceUnavailable, "access could not be checked with the Kubernetes API: "+err.Error())
		return User{}, false
	}
	if !allowed {
		where := "cluster-wide"
		if a.Namespace != "" {
			where = fmt.Sprintf("in namespace %q", a.Namespace)
		}
		msg := fmt.Sprintf("user %q may not %s %s.%s %s", u.Name, a.Verb, a.Resource, APIGroup, where)
		if reason != "" {
			msg += ": " + reason
		}
		h.d.Log.V(1).Info("view refused", "path", r.URL.Path, "user", u.Name)
		writeError(w, http.StatusForbidden, msg)
		return User{}, false
	}
	return u, true
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, u User, err error) {
	var nf *NotFoundError
	if errors.As(err, &nf) {
		writeError(w, http.StatusNotFound, nf.Message)
		return
	}
	h.d.Log.Info("view failed", "path", r.URL.Path, "user", u.Name, "error", err.Error())
	writeError(w, http.StatusServiceUnavailable, err.Error())
}

// BearerToken returns the bearer token of Authorization, else of
// ForwardedAuthorizationHeader.
func BearerToken(h http.Header) (string, bool) {
	for _, name := range []string{"Authorization", ForwardedAuthorizationHeader} {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		scheme, token, ok := strings.Cut(v, " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return "", false
		}
		return token, true
	}
	return "", false
}

func allowGET(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet {
		return true
	}
	w.Header().Set("Allow", http.MethodGet)
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed; the views are read with GET", r.Method))
	return false
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorBody{Code: code, Reason: http.StatusText(code), Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		body = fmt.Appendf(nil, `{"code":500,"reason":"Internal Server Error","message":%q}`, "encoding the answer: "+err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
