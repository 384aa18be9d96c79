// Command runai-sim runs the in-memory Run:ai control plane of
// pkg/runai/runaitest as a process, so the webhook binary, kubectl-driven
// end-to-end tests and shell sessions can talk to "Run:ai" without a tenant.
// It listens on loopback only and is driven at run time through /_sim/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

const usageHead = `runai-sim: an in-memory NVIDIA Run:ai control plane for tests and local runs.

It serves the vendor paths the webhook uses (/api/v2/token, /api/v1/token,
/api/v1/clusters, /api/v1/node-pools, /api/v1/org-unit/departments[/{id}],
/api/v1/org-unit/projects[/{id}], /api/v1/nodes/telemetry) and an admin API
under /_sim/ (faults, latency, outages, allocations, recorded calls; see
pkg/runai/runaitest/admin.go). Flags override the seed file.

Usage: runai-sim [flags]

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is main without os.Exit, so the flag handling can be tested.
func run(args []string, stderr io.Writer) int {
	logger := log.New(stderr, "runai-sim ", log.LstdFlags|log.Lmicroseconds)
	seed, listen, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "runai-sim: %v\n", err)
		return 2
	}

	sim := runaitest.New(seed)
	sim.SetLogf(logger.Printf)
	if err := sim.Start(listen); err != nil {
		fmt.Fprintf(stderr, "runai-sim: %v\n", err)
		return 1
	}
	s := sim.Seed()
	logger.Printf("listening on %s: cluster %q (%s), client id %q, departments %s, v2 token %t, create delay %s, delete delay %s",
		sim.URL(), s.Cluster.Name, s.Cluster.UUID, s.ClientID, departmentNames(s), s.V2TokenEnabled == nil || *s.V2TokenEnabled,
		s.CreateDelay, s.DeleteDelay)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	logger.Printf("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sim.Shutdown(shutdownCtx); err != nil {
		logger.Printf("%v", err)
		return 1
	}
	return 0
}

// parseFlags builds the seed: the file first (if any), then every flag that
// was given explicitly, so a flag default never overrides the file.
func parseFlags(args []string, out io.Writer) (runaitest.Seed, string, error) {
	fs := flag.NewFlagSet("runai-sim", flag.ContinueOnError)
	fs.SetOutput(out)
	listen := fs.String("listen", "127.0.0.1:8080", "loopback address to listen on (127.0.0.1:0 picks a free port)")
	seedFile := fs.String("seed", "", "YAML seed file (see pkg/runai/runaitest/testdata/seed.yaml)")
	cluster := fs.String("cluster", runaitest.DefaultClusterName, "cluster name")
	departments := fs.String("departments", "", `comma-separated departments to create besides "default", e.g. research,ops`)
	clientID := fs.String("client-id", runaitest.DefaultClientID, "client id accepted by the token endpoints")
	clientSecret := fs.String("client-secret", runaitest.DefaultClientSecret, "client secret accepted by the token endpoints")
	tokenTTL := fs.Duration("token-ttl", runaitest.DefaultTokenTTL, "lifetime of issued tokens")
	createDelay := fs.Duration("create-delay", 0, "how long a new project stays Creating before Ready (status.namespace set then)")
	deleteDelay := fs.Duration("delete-delay", 0, "how long a deleted project stays Deleting (DELETE answers 202); 0 = gone at once (204)")
	gpus := fs.Float64("gpus", runaitest.DefaultGPUs, "total GPUs of the default node pool")
	noV2 := fs.Bool("no-v2-token", false, "answer 404 on /api/v2/token, so clients fall back to /api/v1/token")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return runaitest.Seed{}, "", err
	}
	if fs.NArg() > 0 {
		return runaitest.Seed{}, "", fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}

	var seed runaitest.Seed
	if *seedFile != "" {
		s, err := runaitest.LoadSeed(*seedFile)
		if err != nil {
			return runaitest.Seed{}, "", err
		}
		seed = s
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["cluster"] {
		seed.Cluster.Name = *cluster
	}
	if set["client-id"] {
		seed.ClientID = *clientID
	}
	if set["client-secret"] {
		seed.ClientSecret = *clientSecret
	}
	if set["token-ttl"] {
		seed.TokenTTL = *tokenTTL
	}
	if set["create-delay"] {
		seed.CreateDelay = *createDelay
	}
	if set["delete-delay"] {
		seed.DeleteDelay = *deleteDelay
	}
	if *noV2 {
		seed.V2TokenEnabled = runaitest.Bool(false)
	}
	if *departments != "" {
		have := map[string]bool{}
		for _, d := range seed.Departments {
			have[d.Name] = true
		}
		for _, name := range strings.Split(*departments, ",") {
			if name = strings.TrimSpace(name); name != "" && !have[name] {
				seed.Departments = append(seed.Departments, runaitest.DepartmentSeed{Name: name})
				have[name] = true
			}
		}
	}
	seed = seed.WithDefaults()
	if set["gpus"] {
		for i := range seed.NodePools {
			if seed.NodePools[i].IsDefault {
				seed.NodePools[i].TotalGPUs = *gpus
			}
		}
	}
	if err := seed.Validate(); err != nil {
		return runaitest.Seed{}, "", err
	}
	return seed, *listen, nil
}

func departmentNames(s runaitest.Seed) string {
	names := make([]string, 0, len(s.Departments))
	for _, d := range s.Departments {
		names = append(names, d.Name)
	}
	return strings.Join(names, ",")
}
