package main

// The `gpu` and `admin` sub-commands print the webhook's GPU and admin views
// (pkg/gpuview) for people at a terminal.
//
// By default they go through the API server's service proxy with the
// kubeconfig's credentials:
//
//	<api server>/api/v1/namespaces/<service-namespace>/services/https:<service>:443/proxy/api/v1/...
//
// The API server removes the Authorization header once it has authenticated
// the caller, so the CLI repeats the bearer token in
// X-Runai-Webhook-Authorization, which the webhook checks with a TokenReview
// like any token. This needs a kubeconfig user with a bearer token (a token,
// a token file, or an exec or auth-provider plugin) or --token, plus `get` on
// services/proxy in the webhook's namespace: the API server does not pass
// client-certificate identities on to services.
//
// With --server the CLI talks to the webhook directly (a port-forward, an
// ingress, tests), sending --token or the kubeconfig's bearer token, and
// trusting --ca-file (else the system roots).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hopsworks/runai-webhook/pkg/gpuview"
	"github.com/hopsworks/runai-webhook/pkg/quota"
)

// viewFlags are the flags both view commands share.
type viewFlags struct {
	output     string
	kubeconfig string
	context    string
	server     string
	caFile     string
	token      string
	serviceNS  string
	service    string
	timeout    time.Duration
}

func (f *viewFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.output, "o", "table", "output format: table or json")
	fs.StringVar(&f.output, "output", "table", "output format: table or json")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context (default: the current one)")
	fs.StringVar(&f.server, "server", "", "talk to the webhook directly at this https URL instead of through the API server's service proxy")
	fs.StringVar(&f.caFile, "ca-file", "", "CA certificate of the webhook's serving certificate (with --server; default: system roots)")
	fs.StringVar(&f.token, "token", "", "bearer token to present (default: the kubeconfig's)")
	fs.StringVar(&f.serviceNS, "service-namespace", "runai-webhook", "namespace of the webhook's Service (service proxy)")
	fs.StringVar(&f.service, "service", "runai-webhook", "name of the webhook's Service (service proxy)")
	fs.DurationVar(&f.timeout, "timeout", 20*time.Second, "how long to wait for the answer")
}

func (f *viewFlags) validate(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("-o %q: want table or json", f.output)
	}
	if f.server == "" && f.caFile != "" {
		return errors.New("--ca-file applies to --server only (through the service proxy the API server's CA from the kubeconfig is used)")
	}
	if f.server != "" {
		u, err := url.Parse(f.server)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("--server %q: want an https URL such as https://127.0.0.1:9443", f.server)
		}
	}
	return nil
}

func runGPU(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runai-webhook gpu -n NAMESPACE [-o table|json] [--kubeconfig F] [--server URL --ca-file F] [--token T]")
		fs.PrintDefaults()
	}
	var ns string
	fs.StringVar(&ns, "n", "", "namespace (Hopsworks project) to show")
	fs.StringVar(&ns, "namespace", "", "namespace (Hopsworks project) to show")
	var f viewFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if ns == "" {
		fs.Usage()
		return errors.New("gpu: -n NAMESPACE is required")
	}
	if err := f.validate(fs); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	body, err := fetchView(ctx, f, gpuview.NamespacePath(url.PathEscape(ns)))
	if err != nil {
		return fmt.Errorf("gpu view of %s: %w", ns, err)
	}
	if f.output == "json" {
		return writeIndented(stdout, body)
	}
	var v gpuview.NamespaceView
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("decoding the GPU view: %w", err)
	}
	return printNamespaceView(stdout, v)
}

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runai-webhook admin [-o table|json] [--kubeconfig F] [--server URL --ca-file F] [--token T]")
		fs.PrintDefaults()
	}
	var f viewFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := f.validate(fs); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	body, err := fetchView(ctx, f, gpuview.PathAdmin)
	if err != nil {
		return fmt.Errorf("admin view: %w", err)
	}
	if f.output == "json" {
		return writeIndented(stdout, body)
	}
	var v gpuview.AdminView
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("decoding the admin view: %w", err)
	}
	return printAdminView(stdout, v)
}

// fetchView GETs path from the webhook and returns the 200 body; any other
// answer is an error carrying the server's message.
func fetchView(ctx context.Context, f viewFlags, path string) ([]byte, error) {
	hc, base, err := f.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	// Our ErrorBody, or the API server's metav1.Status (same field names).
	var eb gpuview.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Message != "" {
		return nil, fmt.Errorf("%s: %s", resp.Status, eb.Message)
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	return nil, fmt.Errorf("%s: %s", resp.Status, text)
}

// client returns the HTTP client and the base URL the view paths are
// appended to.
func (f viewFlags) client() (*http.Client, string, error) {
	if f.server != "" {
		cfg := &rest.Config{Host: f.server, TLSClientConfig: rest.TLSClientConfig{CAFile: f.caFile}}
		if f.token != "" {
			cfg.BearerToken = f.token
		} else {
			kc, err := f.kubeconfigREST()
			if err != nil {
				return nil, "", err
			}
			if !hasBearer(kc) {
				return nil, "", errors.New("the kubeconfig's user has no bearer token (client certificates do not authenticate to the webhook): pass --token, e.g. from `kubectl create token`")
			}
			cfg.BearerToken, cfg.BearerTokenFile = kc.BearerToken, kc.BearerTokenFile
			cfg.ExecProvider, cfg.AuthProvider, cfg.AuthConfigPersister = kc.ExecProvider, kc.AuthProvider, kc.AuthConfigPersister
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, "", err
		}
		return hc, strings.TrimRight(f.server, "/"), nil
	}
	kc, err := f.kubeconfigREST()
	if err != nil {
		return nil, "", err
	}
	if f.token == "" && !hasBearer(kc) {
		return nil, "", errors.New("through the service proxy the webhook needs a bearer token, and the kubeconfig's user has none " +
			"(the API server does not pass client-certificate identities on to services): pass --token, e.g. from `kubectl create token`")
	}
	cfg := rest.CopyConfig(kc)
	token := f.token
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &forwardToken{next: rt, token: token} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", err
	}
	return hc, strings.TrimRight(cfg.Host, "/") + serviceProxyPath(f.serviceNS, f.service), nil
}

// serviceProxyPath is the API server path that proxies to the webhook
// Service's https port.
func serviceProxyPath(namespace, service string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/services/https:" + url.PathEscape(service) + ":443/proxy"
}

func (f viewFlags) kubeconfigREST() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return cfg, nil
}

func hasBearer(c *rest.Config) bool {
	return c.BearerToken != "" || c.BearerTokenFile != "" || c.ExecProvider != nil || c.AuthProvider != nil
}

// forwardToken repeats the bearer token in ForwardedAuthorizationHeader. It
// sits inside client-go's authentication round trippers (rest.Config.Wrap
// wraps the base transport), so it sees the Authorization header they set,
// whatever the token's source (static, file, exec plugin).
type forwardToken struct {
	next  http.RoundTripper
	token string // explicit --token; else the Authorization header is repeated
}

func (t *forwardToken) RoundTrip(req *http.Request) (*http.Response, error) {
	v := req.Header.Get("Authorization")
	if t.token != "" {
		v = "Bearer " + t.token
	}
	if v == "" {
		return nil, errors.New("no bearer token to forward to the webhook")
	}
	req = req.Clone(req.Context())
	req.Header.Set(gpuview.ForwardedAuthorizationHeader, v)
	return t.next.RoundTrip(req)
}

func writeIndented(w io.Writer, body []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(body), "", "  "); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func viewNum(v *float64) string {
	if v == nil {
		return "-"
	}
	return quota.Format(*v)
}

func viewDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func viewTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func printNamespaceView(w io.Writer, v gpuview.NamespaceView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	terminal := "no GPUs (the project has no deserved Run:ai GPUs)"
	if v.TerminalGPUsAllowed {
		terminal = "GPUs allowed"
	}
	if !v.NumbersRead() {
		terminal = "-"
	}
	hd := v.HopsworksDepartment
	if hd == "" {
		hd = "(default)"
	}
	rows := [][2]string{
		{"Namespace", v.Namespace},
		{"Hopsworks department", hd},
		{"Run:ai project", viewDash(v.Project)},
		{"Run:ai department", viewDash(v.Department)},
		{"Status", v.Status},
		{"Node pool", viewDash(v.NodePool)},
		{"Deserved GPUs", viewNum(v.Deserved)},
		{"Allocated GPUs", viewNum(v.Allocated)},
		{"Allocated non-preemptible", viewNum(v.AllocatedNonPreemptible)},
		{"Available non-preemptible", viewNum(v.AvailableNonPreemptible)},
		{"Available preemptible", viewNum(v.AvailablePreemptible)},
		{"Terminal", terminal},
		{"Read at", viewTime(v.ReadAt)},
	}
	if v.Message != "" {
		rows = append(rows, [2]string{"Message", v.Message})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

func viewLinked(l *bool) string {
	switch {
	case l == nil:
		return "-"
	case *l:
		return "yes"
	}
	return "no"
}

func printAdminView(w io.Writer, v gpuview.AdminView) error {
	head := "Run:ai: " + v.Status
	if !v.Enabled {
		head = "Run:ai integration: off"
	}
	if v.ReadAt != nil {
		head += " (read at " + viewTime(v.ReadAt) + ")"
	}
	fmt.Fprintf(w, "%s; default department %s\n", head, v.DefaultDepartment)
	if v.Message != "" {
		fmt.Fprintln(w, v.Message)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOPSWORKS DEPARTMENT\tNAMESPACES\tLINKED\tRUN:AI DEPARTMENT\tGPU QUOTA\tALLOCATED GPUS\tSTATUS")
	for _, d := range v.Departments {
		name := d.Name
		if d.Default {
			name = "(default)"
		}
		status := d.Status
		if d.ProjectsGoTo != "" && d.RunAIDepartment == "" {
			status += " (projects go to " + d.ProjectsGoTo + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", name, d.Namespaces, viewLinked(d.Linked), viewDash(d.RunAIDepartment), viewNum(d.GPUQuota), viewNum(d.AllocatedGPUs), status)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NAMESPACE\tHOPSWORKS DEPARTMENT\tLINKED\tRUN:AI PROJECT\tRUN:AI DEPARTMENT\tGPU QUOTA\tALLOCATED GPUS\tSTATUS")
	for _, p := range v.Projects {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, viewDept(p.HopsworksDepartment), viewLinked(p.Linked), viewDash(p.Project), viewDash(p.Department), viewNum(p.GPUQuota), viewNum(p.AllocatedGPUs), p.Status)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "RUN:AI DEPARTMENT\tGPU QUOTA\tALLOCATED GPUS\tHOPSWORKS DEPARTMENTS\tPROJECTS")
	for _, d := range v.RunAIDepartments {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", d.Name, viewNum(d.GPUQuota), viewNum(d.AllocatedGPUs), viewDash(strings.Join(d.HopsworksDepartments, ",")), len(d.Projects))
	}
	return tw.Flush()
}

func viewDept(hd string) string {
	if hd == "" {
		return "(default)"
	}
	return hd
}
