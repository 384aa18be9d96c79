package runaitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// api is a bare HTTP client for the simulator: the tests check wire
// behaviour (status codes, JSON shapes), not the runai.Client.
type api struct {
	t     *testing.T
	base  string
	token string
	hc    *http.Client
}

func newAPI(t *testing.T, s *runaitest.Server) *api {
	t.Helper()
	a := &api{t: t, base: s.URL(), hc: &http.Client{Timeout: 5 * time.Second}}
	a.token = a.login(s.Seed().ClientID, s.Seed().ClientSecret)
	return a
}

func (a *api) login(id, secret string) string {
	a.t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	resp, err := a.hc.PostForm(a.base+"/api/v2/token", form)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	require.Equal(a.t, http.StatusOK, resp.StatusCode)
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	require.NoError(a.t, json.NewDecoder(resp.Body).Decode(&tr))
	return tr.AccessToken
}

// do sends a request with the bearer token and returns status and raw body.
func (a *api) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	status, b, err := a.try(context.Background(), method, path, body)
	require.NoError(a.t, err)
	return status, b
}

func (a *api) try(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		switch v := body.(type) {
		case string:
			rd = strings.NewReader(v)
		default:
			b, err := json.Marshal(v)
			require.NoError(a.t, err)
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	require.NoError(a.t, err)
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// getJSON decodes a 200 answer into a generic map (to see exactly which
// fields are on the wire).
func (a *api) getJSON(path string) map[string]any {
	a.t.Helper()
	status, b := a.do(http.MethodGet, path, nil)
	require.Equal(a.t, http.StatusOK, status, string(b))
	var m map[string]any
	require.NoError(a.t, json.Unmarshal(b, &m))
	return m
}

func (a *api) createProject(req map[string]any) (int, map[string]any) {
	a.t.Helper()
	status, b := a.do(http.MethodPost, "/api/v1/org-unit/projects", req)
	var m map[string]any
	require.NoError(a.t, json.Unmarshal(b, &m), string(b))
	return status, m
}

func projectReq(s *runaitest.Server, name string, extra map[string]any) map[string]any {
	req := map[string]any{
		"name":               name,
		"clusterId":          s.Cluster().UUID,
		"requestedNamespace": name,
		"resources": []any{map[string]any{
			"nodePool": map[string]any{"id": s.DefaultNodePool().ID, "name": s.DefaultNodePool().Name},
			"gpu":      map[string]any{"deserved": 2},
		}},
	}
	for k, v := range extra {
		if v == nil {
			delete(req, k)
			continue
		}
		req[k] = v
	}
	return req
}

// errorBody asserts the vendor Error shape {"code": status, "message": ...}.
func errorBody(t *testing.T, status int, b []byte) string {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	require.NoError(t, json.Unmarshal(b, &e), string(b))
	require.Equal(t, status, e.Code, string(b))
	require.NotEmpty(t, e.Message)
	return e.Message
}

func names(items []any) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.(map[string]any)["name"].(string))
	}
	return out
}
