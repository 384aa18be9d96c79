package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHelpExitsZeroWithUsage(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 0, run([]string{"--help"}, &out))
	assert.Contains(t, out.String(), "Usage: runai-sim [flags]")
	assert.Contains(t, out.String(), "-no-v2-token")
}

func TestBadFlagsExitTwo(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 2, run([]string{"--departments", "Bad_Name"}, &out))
	assert.Contains(t, out.String(), "Bad_Name")
	out.Reset()
	assert.Equal(t, 2, run([]string{"stray"}, &out))
}

func TestNonLoopbackListenIsRefused(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 1, run([]string{"--listen", "0.0.0.0:0"}, &out))
	assert.Contains(t, out.String(), "loopback")
}

func TestFlagsOverrideTheSeedFile(t *testing.T) {
	seed, listen, err := parseFlags([]string{
		"--seed", "../../pkg/runai/runaitest/testdata/seed.yaml",
		"--cluster", "other", "--gpus", "4", "--no-v2-token", "--departments", "research,extra",
		"--create-delay", "5s", "--listen", "127.0.0.1:0",
	}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", listen)
	assert.Equal(t, "other", seed.Cluster.Name)
	assert.Equal(t, "hopsworks-webhook", seed.ClientID, "from the file: the flag was not given")
	assert.Equal(t, 5*time.Second, seed.CreateDelay)
	assert.Equal(t, 3*time.Second, seed.DeleteDelay, "from the file")
	require.NotNil(t, seed.V2TokenEnabled)
	assert.False(t, *seed.V2TokenEnabled)
	var depts []string
	for _, d := range seed.Departments {
		depts = append(depts, d.Name)
	}
	assert.Equal(t, []string{"default", "research", "ml-platform", "extra"}, depts)
	assert.Equal(t, 4.0, seed.NodePools[0].TotalGPUs)
	assert.Equal(t, 8.0, seed.NodePools[1].TotalGPUs)
}

func TestDefaultsWithoutSeed(t *testing.T) {
	seed, listen, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", listen)
	assert.Equal(t, "sim-cluster", seed.Cluster.Name)
	assert.Nil(t, seed.V2TokenEnabled)
	require.Len(t, seed.NodePools, 1)
	assert.Equal(t, 8.0, seed.NodePools[0].TotalGPUs)
}
