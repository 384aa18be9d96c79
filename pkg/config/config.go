// Package config holds the webhook's settings. The Run:ai settings carry the
// names of the Hopsworks cluster variables (run_ai_enable, run_ai_url, ...) so
// an operator finds the same words in the Hopsworks docs, the Helm values, the
// flags and the environment. Every value can come from a flag (--run_ai_url)
// or an environment variable (RUN_AI_URL); a flag wins.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Defaults from DESIGN.md §2 and the Hopsworks documentation.
const (
	DefaultRunAIURL           = "http://runai-backend-traefik.runai-backend.svc.cluster.local:8080"
	DefaultDepartment         = "default"
	DefaultQueueLabelKey      = "runai/queue"
	DefaultSchedulerName      = "runai-scheduler"
	DefaultProjectLabel       = "hopsworks.ai/project"
	DefaultDepartmentLabel    = "hopsworks.ai/department"
	DefaultReconcileInterval  = 5 * time.Minute
	DefaultBindTimeout        = 7 * time.Second
	DefaultQuotaMaxAge        = 30 * time.Second
	DefaultWebhookServiceUser = "system:serviceaccount:runai-webhook:runai-webhook"
)

// Config is the validated configuration of one webhook process.
type Config struct {
	// RunAIEnable turns the integration on. Off: no Run:ai call at all, pods pass.
	RunAIEnable bool
	// RunAIURL is the base address of the Run:ai control plane.
	RunAIURL string
	// RunAIClientID is the Run:ai service account's client id.
	RunAIClientID string
	// RunAIClientSecretFile is the mounted file holding the client secret; the
	// secret itself is never a flag or an environment variable.
	RunAIClientSecretFile string
	// RunAICluster names the Run:ai cluster; empty means the only one.
	RunAICluster string
	// DefaultDepartment is run_ai_default_department: where projects of
	// departments with no Run:ai twin go.
	DefaultDepartment string
	// ProjectGPUQuota is run_ai_project_gpu_quota: deserved GPUs of new projects.
	ProjectGPUQuota float64
	// ReconcileInterval is run_ai_reconcile_interval_s.
	ReconcileInterval time.Duration
	// KueueInstalled is kueue_installed; mutually exclusive with RunAIEnable.
	KueueInstalled bool

	// QueueLabelKey is the pod and namespace label naming the Run:ai queue.
	// KAI renamed runai/queue to kai.scheduler/queue, so it is configurable.
	QueueLabelKey string
	// SchedulerName is the scheduler GPU pods must use.
	SchedulerName string
	// ProjectLabel marks a namespace as a Hopsworks project (managed).
	ProjectLabel string
	// DepartmentLabel carries the Hopsworks department of a namespace.
	DepartmentLabel string
	// WebhookUser is the Kubernetes user name of the webhook's own service
	// account, the only one allowed to write the binding labels.
	WebhookUser string
	// BindTimeout bounds a bind inside admission; it stays under the webhook timeout.
	BindTimeout time.Duration
	// QuotaMaxAge is the oldest Run:ai quota a refusal may be based on.
	QuotaMaxAge time.Duration
}

// nameRule is the department naming rule shared by Hopsworks and Run:ai.
var nameRule = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidDepartmentName reports whether name follows the department rule: at
// most 63 lowercase letters, digits and '-', starting and ending with a letter
// or digit.
func ValidDepartmentName(name string) bool { return nameRule.MatchString(name) }

// Default returns the configuration with every default applied.
func Default() Config {
	return Config{
		RunAIURL:          DefaultRunAIURL,
		DefaultDepartment: DefaultDepartment,
		ReconcileInterval: DefaultReconcileInterval,
		QueueLabelKey:     DefaultQueueLabelKey,
		SchedulerName:     DefaultSchedulerName,
		ProjectLabel:      DefaultProjectLabel,
		DepartmentLabel:   DefaultDepartmentLabel,
		WebhookUser:       DefaultWebhookServiceUser,
		BindTimeout:       DefaultBindTimeout,
		QuotaMaxAge:       DefaultQuotaMaxAge,
	}
}

// binding is one setting: its flag name (the Hopsworks variable name where one
// exists), its environment name, and how to parse it into Config.
type binding struct {
	name, usage string
	set         func(c *Config, v string) error
	get         func(c *Config) string
}

func boolSetting(p func(*Config) *bool) (func(*Config, string) error, func(*Config) string) {
	return func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			*p(c) = b
			return nil
		}, func(c *Config) string {
			return strconv.FormatBool(*p(c))
		}
}

func stringSetting(p func(*Config) *string) (func(*Config, string) error, func(*Config) string) {
	return func(c *Config, v string) error { *p(c) = v; return nil }, func(c *Config) string { return *p(c) }
}

func durationSetting(p func(*Config) *time.Duration) (func(*Config, string) error, func(*Config) string) {
	return func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("want a duration such as 5s, got %q", v)
			}
			*p(c) = d
			return nil
		}, func(c *Config) string {
			return p(c).String()
		}
}

func bindings() []binding {
	mk := func(name, usage string, s func(*Config, string) error, g func(*Config) string) binding {
		return binding{name: name, usage: usage, set: s, get: g}
	}
	var b []binding
	s, g := boolSetting(func(c *Config) *bool { return &c.RunAIEnable })
	b = append(b, mk("run_ai_enable", "turn the Run:ai integration on", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.RunAIURL })
	b = append(b, mk("run_ai_url", "Run:ai control-plane base URL", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.RunAIClientID })
	b = append(b, mk("run_ai_client_id", "Run:ai service account client id", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.RunAIClientSecretFile })
	b = append(b, mk("run_ai_client_secret_file", "file holding the Run:ai client secret (mounted from run_ai_client_secret_name/key)", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.RunAICluster })
	b = append(b, mk("run_ai_cluster", "Run:ai cluster name (empty: the only cluster)", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.DefaultDepartment })
	b = append(b, mk("run_ai_default_department", "Run:ai department for projects whose department has no Run:ai twin", s, g))
	b = append(b, mk("run_ai_project_gpu_quota", "deserved GPUs of new Run:ai projects (default node pool)",
		func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("want a number of GPUs, got %q", v)
			}
			c.ProjectGPUQuota = f
			return nil
		}, func(c *Config) string { return strconv.FormatFloat(c.ProjectGPUQuota, 'f', -1, 64) }))
	b = append(b, mk("run_ai_reconcile_interval_s", "seconds between background passes",
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("want whole seconds, got %q", v)
			}
			c.ReconcileInterval = time.Duration(n) * time.Second
			return nil
		}, func(c *Config) string { return strconv.FormatInt(int64(c.ReconcileInterval/time.Second), 10) }))
	s, g = boolSetting(func(c *Config) *bool { return &c.KueueInstalled })
	b = append(b, mk("kueue_installed", "Kueue is installed (exclusive with run_ai_enable)", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.QueueLabelKey })
	b = append(b, mk("queue_label_key", "label naming the Run:ai queue (runai/queue, or kai.scheduler/queue)", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.SchedulerName })
	b = append(b, mk("scheduler_name", "scheduler that GPU pods must use", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.ProjectLabel })
	b = append(b, mk("project_label", "namespace label marking a Hopsworks project", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.DepartmentLabel })
	b = append(b, mk("department_label", "namespace label carrying the Hopsworks department", s, g))
	s, g = stringSetting(func(c *Config) *string { return &c.WebhookUser })
	b = append(b, mk("webhook_user", "user name of the webhook's service account (only it may write binding labels)", s, g))
	sd, gd := durationSetting(func(c *Config) *time.Duration { return &c.BindTimeout })
	b = append(b, mk("bind_timeout", "deadline of a bind inside admission (under the webhook timeout)", sd, gd))
	sd, gd = durationSetting(func(c *Config) *time.Duration { return &c.QuotaMaxAge })
	b = append(b, mk("quota_max_age", "oldest Run:ai quota a refusal may be based on", sd, gd))
	return b
}

// EnvName is the environment variable of a setting: its name in upper case.
func EnvName(name string) string { return strings.ToUpper(name) }

// Register adds every setting as a flag on fs, writing into c. Call it before
// fs.Parse, then ApplyEnv for the settings no flag set.
func Register(fs *flag.FlagSet, c *Config) {
	for _, b := range bindings() {
		fs.Func(b.name, b.usage+" (env "+EnvName(b.name)+", default "+b.get(c)+")", func(v string) error { return b.set(c, v) })
	}
}

// ApplyEnv fills the settings that were not given as flags from the
// environment (lookup is os.LookupEnv in production).
func ApplyEnv(fs *flag.FlagSet, c *Config, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	for _, b := range bindings() {
		if given[b.name] {
			continue
		}
		if v, ok := lookup(EnvName(b.name)); ok {
			if err := b.set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", EnvName(b.name), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Validate checks c and returns every problem, one line each, so an operator
// fixes them all in one go. readFile is os.ReadFile in production.
func (c Config) Validate(readFile func(string) ([]byte, error)) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.RunAIEnable && c.KueueInstalled {
		bad("run_ai_enable and kueue_installed are both true: Kueue and Run:ai are mutually exclusive; turn one off")
	}
	if u, err := url.Parse(c.RunAIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("run_ai_url %q is not an absolute http(s) URL", c.RunAIURL)
	}
	if c.RunAIEnable {
		if c.RunAIClientID == "" {
			bad("run_ai_client_id is empty while run_ai_enable is true")
		}
		switch {
		case c.RunAIClientSecretFile == "":
			bad("run_ai_client_secret_file is not set while run_ai_enable is true")
		default:
			data, err := readFile(c.RunAIClientSecretFile)
			if err != nil {
				bad("run_ai_client_secret_file %s cannot be read: %v", c.RunAIClientSecretFile, errors.Unwrap(err))
			} else if strings.TrimSpace(string(data)) == "" {
				bad("run_ai_client_secret_file %s is empty", c.RunAIClientSecretFile)
			}
		}
	}
	if !ValidDepartmentName(c.DefaultDepartment) {
		bad("run_ai_default_department %q breaks the naming rule: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", c.DefaultDepartment)
	}
	if c.ProjectGPUQuota < 0 {
		bad("run_ai_project_gpu_quota is %v; it must be 0 or more", c.ProjectGPUQuota)
	}
	if c.ReconcileInterval <= 0 {
		bad("run_ai_reconcile_interval_s is %d; it must be more than 0", int64(c.ReconcileInterval/time.Second))
	}
	if c.QueueLabelKey == "" || c.SchedulerName == "" || c.ProjectLabel == "" || c.DepartmentLabel == "" {
		bad("queue_label_key, scheduler_name, project_label and department_label must not be empty")
	}
	if c.BindTimeout <= 0 || c.BindTimeout > 25*time.Second {
		bad("bind_timeout is %s; it must be more than 0 and at most 25s (under the API server's 30s webhook limit)", c.BindTimeout)
	}
	if c.QuotaMaxAge <= 0 {
		bad("quota_max_age is %s; it must be more than 0", c.QuotaMaxAge)
	}
	return errors.Join(errs...)
}

// ClientSecret reads the secret from its file, trimmed of surrounding space.
func (c Config) ClientSecret() (string, error) {
	data, err := os.ReadFile(c.RunAIClientSecretFile)
	if err != nil {
		return "", fmt.Errorf("reading run_ai_client_secret_file: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}
