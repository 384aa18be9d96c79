package config

import (
	"flag"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func files(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		v, ok := m[p]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		}
		return []byte(v), nil
	}
}

func TestValidate(t *testing.T) {
	enabled := func(mod func(*Config)) Config {
		c := Default()
		c.RunAIEnable = true
		c.RunAIClientID = "hopsworks"
		c.RunAIClientSecretFile = "/secret"
		mod(&c)
		return c
	}
	secret := files(map[string]string{"/secret": "s3cret\n", "/empty": " \n"})
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings, one per expected line; empty = valid
	}{
		{"defaults are valid (integration off)", Default(), nil},
		{"enabled and complete", enabled(func(*Config) {}), nil},
		{"run:ai and kueue both on", enabled(func(c *Config) { c.KueueInstalled = true }), []string{"mutually exclusive"}},
		{"malformed url", enabled(func(c *Config) { c.RunAIURL = "runai:8080" }), []string{`run_ai_url "runai:8080" is not an absolute`}},
		{"relative url", enabled(func(c *Config) { c.RunAIURL = "/api" }), []string{"run_ai_url"}},
		{"missing secret file", enabled(func(c *Config) { c.RunAIClientSecretFile = "/nope" }), []string{"/nope cannot be read: file does not exist"}},
		{"empty secret file", enabled(func(c *Config) { c.RunAIClientSecretFile = "/empty" }), []string{"/empty is empty"}},
		{"secret file unset", enabled(func(c *Config) { c.RunAIClientSecretFile = "" }), []string{"run_ai_client_secret_file is not set"}},
		{"no client id", enabled(func(c *Config) { c.RunAIClientID = "" }), []string{"run_ai_client_id is empty"}},
		{"secret not needed when off", func() Config { c := Default(); c.RunAIClientSecretFile = "/nope"; return c }(), nil},
		{"bad default department", enabled(func(c *Config) { c.DefaultDepartment = "Data_Science" }), []string{`run_ai_default_department "Data_Science" breaks the naming rule`}},
		{"negative quota", enabled(func(c *Config) { c.ProjectGPUQuota = -1 }), []string{"run_ai_project_gpu_quota is -1"}},
		{"negative interval", enabled(func(c *Config) { c.ReconcileInterval = -time.Second }), []string{"run_ai_reconcile_interval_s is -1"}},
		{"bind timeout over the webhook limit", enabled(func(c *Config) { c.BindTimeout = 40 * time.Second }), []string{"bind_timeout is 40s"}},
		{"several problems, one line each", enabled(func(c *Config) { c.KueueInstalled = true; c.ProjectGPUQuota = -2 }), []string{"mutually exclusive", "run_ai_project_gpu_quota"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate(secret)
			if len(tt.want) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "one line per problem: %q", err)
			for i, w := range tt.want {
				assert.Contains(t, lines[i], w)
			}
			assert.NotContains(t, err.Error(), "s3cret", "the secret never appears in errors")
		})
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	Register(fs, &c)
	require.NoError(t, fs.Parse([]string{"--run_ai_enable=true", "--run_ai_url=http://flag:1"}))
	env := map[string]string{
		"RUN_AI_URL":                  "http://env:2", // the flag wins
		"RUN_AI_PROJECT_GPU_QUOTA":    "1.5",
		"RUN_AI_RECONCILE_INTERVAL_S": "30",
		"RUN_AI_DEFAULT_DEPARTMENT":   "research",
		"QUEUE_LABEL_KEY":             "kai.scheduler/queue",
	}
	require.NoError(t, ApplyEnv(fs, &c, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	assert.True(t, c.RunAIEnable)
	assert.Equal(t, "http://flag:1", c.RunAIURL)
	assert.Equal(t, 1.5, c.ProjectGPUQuota)
	assert.Equal(t, 30*time.Second, c.ReconcileInterval)
	assert.Equal(t, "research", c.DefaultDepartment)
	assert.Equal(t, "kai.scheduler/queue", c.QueueLabelKey)
}

func TestBadValuesNameTheirSetting(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	Register(fs, &c)
	env := map[string]string{"RUN_AI_ENABLE": "yes please", "RUN_AI_PROJECT_GPU_QUOTA": "two"}
	err := ApplyEnv(fs, &c, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.Error(t, err)
	assert.Contains(t, err.Error(), `RUN_AI_ENABLE: want true or false, got "yes please"`)
	assert.Contains(t, err.Error(), `RUN_AI_PROJECT_GPU_QUOTA: want a number of GPUs, got "two"`)
	fs.SetOutput(new(strings.Builder))
	assert.Error(t, fs.Parse([]string{"--bind_timeout=soon"}))
}

func TestValidDepartmentName(t *testing.T) {
	for name, want := range map[string]bool{
		"default": true, "a": true, "9": true, "data-science": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "Data": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false,
	} {
		assert.Equal(t, want, ValidDepartmentName(name), name)
	}
}
