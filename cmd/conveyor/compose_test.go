package main

// The test of docker-compose.yml (and of it with the test override docker-compose.e2e.yml):
// it loads them with the Compose specification's own loader, which validates them against the
// Compose schema, then checks every service that runs the conveyor image against this
// package's real command tree: its command and health check parse as conveyor command lines
// (an unknown command or flag fails), every environment variable it sets is a CONVEYOR_*
// variable that its command reads (root.go's envVars, the binary's list), and the ports, health checks and depends_on agree with what
// the commands listen on and connect to.
//
// It lives here, in package main, because the command tree is built by package main's
// unexported rootCmd. That puts github.com/compose-spec/compose-go/v2 in the main module's
// go.mod, as a test-only dependency: about a dozen small modules (no Docker engine or client
// code), which a program importing Conveyor's packages never builds or downloads.
// scripts/compose-e2e.sh runs the same files for real.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// composeDir is the repository's top level, where the compose files are.
const composeDir = "../.."

// composeRedisService is the name of the Redis service every conveyor service depends on.
const composeRedisService = "redis"

// composeE2EEnv stands for what scripts/compose-e2e.sh sets for the override.
var composeE2EEnv = map[string]string{"E2E_IMAGE": "conveyor:e2e-test", "E2E_REDIS_PORT": "24111", "E2E_API_PORT": "24112"}

func TestComposeFile(t *testing.T) {
	base := readComposeFile(t, "docker-compose.yml")
	e2e := readComposeFile(t, "docker-compose.e2e.yml")
	for _, tc := range []struct {
		name  string
		files []types.ConfigFile
		env   map[string]string
	}{
		{"docker-compose.yml", []types.ConfigFile{base}, nil},
		{"with docker-compose.e2e.yml", []types.ConfigFile{base, e2e}, composeE2EEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := loadCompose(t, tc.files, tc.env)
			if err != nil {
				t.Fatalf("the Compose loader refuses the file: %v", err)
			}
			for _, err := range checkCompose(p) {
				t.Error(err)
			}
		})
	}
	t.Run("README documents every variable", func(t *testing.T) {
		p, err := loadCompose(t, []types.ConfigFile{base}, nil)
		if err != nil {
			t.Fatal(err)
		}
		readme, err := os.ReadFile(filepath.Join(composeDir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		// README's "With Docker" documents every variable the binary reads, those the
		// services set first of all.
		_, docker, _ := strings.Cut(string(readme), "\n## With Docker\n")
		docker, _, _ = strings.Cut(docker, "\n## ")
		for _, s := range p.Services {
			for name := range s.Environment {
				if strings.HasPrefix(name, "CONVEYOR_") && !strings.Contains(docker, "`"+name+"`") {
					t.Errorf("service %s sets %s, which README.md's With Docker section does not document", s.Name, name)
				}
			}
		}
		for _, ev := range envVars {
			if !strings.Contains(docker, "`"+ev.Name+"`") {
				t.Errorf("README.md's With Docker section does not list %s (root.go's envVars)", ev.Name)
			}
		}
	})
}

// TestComposeFileCheckFails breaks docker-compose.yml in one place at a time and wants the
// check to say so: the test above can fail.
func TestComposeFileCheckFails(t *testing.T) {
	base := readComposeFile(t, "docker-compose.yml")
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"an unknown flag", `"--every", "200ms"`, `"--evry", "200ms"`, "unknown flag: --evry"},
		{"a bad flag value", `"--every", "200ms"`, `"--every", "often"`, `invalid argument "often" for "--every"`},
		{"an unknown command", `command: ["serve"]`, `command: ["serv"]`, `unknown command "serv"`},
		{"a stray argument", `command: ["serve"]`, `command: ["serve", "now"]`, `unexpected argument "now"`},
		{"a variable the binary does not read", "CONVEYOR_LOG_FORMAT: console", "CONVEYOR_LOGFORMAT: console", "CONVEYOR_LOGFORMAT, which the binary does not read"},
		{"a variable the command does not read", "CONVEYOR_LOG_FORMAT: console #", "CONVEYOR_API_ADDR: :9999\n  CONVEYOR_LOG_FORMAT: console #",
			"sets CONVEYOR_API_ADDR, which `conveyor worker` does not read (it is `conveyor serve --addr`'s)"},
		{"a bad variable value", "CONVEYOR_LOG_FORMAT: console", "CONVEYOR_LOG_FORMAT: pretty", "$CONVEYOR_LOG_FORMAT"},
		{"serve without a token", "CONVEYOR_API_TOKEN: ${CONVEYOR_API_TOKEN", "X_TOKEN: ${CONVEYOR_API_TOKEN", "without an API token"},
		{"a published port serve does not listen on", `"127.0.0.1:8080:8080"`, `"127.0.0.1:8080:8081"`, "port 8081"},
		{"a health check on another port", "--probe\", \"http://127.0.0.1:8080/readyz", "--probe\", \"http://127.0.0.1:9090/readyz", "probes port 9090"},
		{"a worker that does not wait for Redis", "condition: service_healthy", "condition: service_started", "service_healthy"},
		{"a Redis URL to no service", "redis://redis:6379/0", "redis://cache:6379/0", `host "cache"`},
		{"a Redis URL on another port", "redis://redis:6379/0", "redis://redis:6380/0", "6380"},
		{"a key the schema does not have", "restart: unless-stopped\n  read_only", "restrat: unless-stopped\n  read_only", "restrat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(base.Content), tc.old) {
				t.Fatalf("docker-compose.yml no longer holds %q: update this case", tc.old)
			}
			broken := base
			broken.Content = []byte(strings.Replace(string(base.Content), tc.old, tc.new, 1))
			var errs []error
			p, err := loadCompose(t, []types.ConfigFile{broken}, nil)
			if err != nil {
				errs = []error{err}
			} else {
				errs = checkCompose(p)
			}
			if len(errs) == 0 {
				t.Fatalf("the check passes a file with %s (%q for %q)", tc.name, tc.new, tc.old)
			}
			if msg := errors.Join(errs...).Error(); !strings.Contains(msg, tc.want) {
				t.Errorf("the check's errors do not mention %q:\n%s", tc.want, msg)
			}
		})
	}
}

func readComposeFile(t *testing.T, name string) types.ConfigFile {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(composeDir, name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return types.ConfigFile{Filename: path, Content: b}
}

// loadCompose loads the files as `docker compose -f ... -f ...` does, every profile active,
// with the variables of .env and env (never this process's environment, which a developer's
// CONVEYOR_API_TOKEN, say, would leak into). The loader validates each file against the
// Compose schema and checks references between services.
func loadCompose(t *testing.T, files []types.ConfigFile, env map[string]string) (*types.Project, error) {
	t.Helper()
	dir, err := filepath.Abs(composeDir)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := dotenv.Read(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatalf(".env: %v", err)
	}
	for k, v := range env {
		vars[k] = v
	}
	return loader.LoadWithContext(context.Background(),
		types.ConfigDetails{WorkingDir: dir, ConfigFiles: files, Environment: vars},
		func(o *loader.Options) {
			o.SetProjectName("conveyor-compose-test", true)
			o.Profiles = []string{"*"}
		})
}

// composeInvocation is a conveyor command line parsed against the real command tree.
type composeInvocation struct {
	app  *app
	cmd  *cobra.Command
	help bool // --help: it prints the help and exits 0, connecting nowhere
}

// parseConveyor parses args as `conveyor args...` with the environment env, as run does, up to
// running the command: the subcommand must exist, the flags must be its own (or global) and
// their values well-formed, the arguments as many as it takes, the required flags given, and
// the global settings from flags and CONVEYOR_* variables valid (setup).
func parseConveyor(args []string, env map[string]string) (*composeInvocation, error) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard,
		getenv: func(k string) string { return env[k] }, log: zerolog.Nop(),
		redisURL: defaultRedisURL, redisSource: "the default"}
	root := a.rootCmd()
	if err := unknownCommandIn(root, args); err != nil {
		return nil, err
	}
	cmd, rest, err := root.Find(args)
	if err != nil {
		return nil, err
	}
	if err := cmd.ParseFlags(rest); errors.Is(err, pflag.ErrHelp) {
		return &composeInvocation{app: a, cmd: cmd, help: true}, nil
	} else if err != nil {
		return nil, err
	}
	if cmd.Args != nil {
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			return nil, err
		}
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return nil, err
	}
	if err := a.setup(cmd, cmd.Flags().Args()); err != nil {
		return nil, err
	}
	return &composeInvocation{app: a, cmd: cmd}, nil
}

// envReadBy returns the flag of cmd (its own or inherited) whose help says it reads the
// variable name ("env $NAME", which rootCmd adds from envVars), or nil.
func envReadBy(cmd *cobra.Command, name string) *pflag.Flag {
	var found *pflag.Flag
	visit := func(f *pflag.Flag) {
		if found == nil && regexp.MustCompile(`\benv \$`+regexp.QuoteMeta(name)+`\b`).MatchString(f.Usage) {
			found = f
		}
	}
	cmd.LocalFlags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return found
}

// isConveyorService reports whether s runs the image built from this repository's Dockerfile
// (whose entrypoint is conveyor).
func isConveyorService(p *types.Project, s types.ServiceConfig) bool {
	return s.Build != nil && filepath.Clean(s.Build.Context) == filepath.Clean(p.WorkingDir)
}

// checkCompose checks the loaded project; it returns every problem found.
func checkCompose(p *types.Project) []error {
	var errs []error
	bad := func(s types.ServiceConfig, format string, args ...any) {
		errs = append(errs, fmt.Errorf("service %s: %s", s.Name, fmt.Sprintf(format, args...)))
	}
	for _, want := range []string{composeRedisService, "worker", "api", "producer"} {
		if _, ok := p.Services[want]; !ok {
			errs = append(errs, fmt.Errorf("no service %s", want))
		}
	}
	redisSvc, ok := p.Services[composeRedisService]
	if !ok {
		return errs
	}
	redisPort := checkRedisService(redisSvc, bad)

	for _, s := range p.Services {
		if s.Restart == "" {
			bad(s, "no restart policy")
		}
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionHealthy {
				if hc := p.Services[dep].HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
					bad(s, "waits for %s to be healthy, which has no health check", dep)
				}
			}
		}
		if s.Name == composeRedisService {
			continue
		}
		if d, ok := s.DependsOn[composeRedisService]; !ok || d.Condition != types.ServiceConditionHealthy {
			bad(s, "does not depend on %s with condition service_healthy", composeRedisService)
		}
		if !isConveyorService(p, s) {
			bad(s, "does not run the conveyor image built from the Dockerfile (build: .)")
			continue
		}
		checkConveyorService(s, redisSvc, redisPort, bad)
	}
	return errs
}

// checkRedisService checks the Redis service and returns the port it listens on.
func checkRedisService(s types.ServiceConfig, bad func(types.ServiceConfig, string, ...any)) string {
	port := "6379"
	if i := slices.Index(s.Command, "--port"); i >= 0 && i+1 < len(s.Command) {
		port = s.Command[i+1]
	}
	if i := slices.Index(s.Command, "--appendonly"); i < 0 || i+1 >= len(s.Command) || s.Command[i+1] != "yes" {
		bad(s, "not started with --appendonly yes: jobs would be lost with the container")
	}
	if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeVolume && v.Target == "/data"
	}) {
		bad(s, "no named volume on /data")
	}
	hc := s.HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) < 2 {
		bad(s, "no health check")
		return port
	}
	check := strings.Join(hc.Test[1:], " ")
	if !strings.Contains(check, "redis-cli") || !strings.Contains(check, "ping") {
		bad(s, "health check %q does not ping with redis-cli", check)
	}
	if m := regexp.MustCompile(`-p\s+(\S+)`).FindStringSubmatch(check); m != nil && m[1] != port || m == nil && port != "6379" {
		bad(s, "health check %q asks another port than Redis's %s", check, port)
	}
	return port
}

// checkConveyorService checks one service of the conveyor image.
func checkConveyorService(s, redisSvc types.ServiceConfig, redisPort string, bad func(types.ServiceConfig, string, ...any)) {
	if len(s.Entrypoint) > 0 {
		bad(s, "overrides the image's entrypoint (conveyor) with %q", s.Entrypoint)
	}
	env := map[string]string{}
	for name, v := range s.Environment {
		switch {
		case !strings.HasPrefix(name, "CONVEYOR_"):
			bad(s, "sets %s: settings go through CONVEYOR_* variables", name)
		case v == nil || *v == "":
			bad(s, "sets %s to nothing: the binary takes an empty variable as unset", name)
		default:
			env[name] = *v
		}
	}
	inv, err := parseConveyor(s.Command, env)
	if err != nil {
		bad(s, "command %q: %v", s.Command, err)
		return
	}
	cmd := inv.cmd
	for name := range env {
		i := slices.IndexFunc(envVars, func(ev envVar) bool { return ev.Name == name })
		switch {
		case i < 0:
			bad(s, "sets %s, which the binary does not read (not in root.go's envVars)", name)
		case envVars[i].Command != "" && envVars[i].Command != cmd.Name():
			bad(s, "sets %s, which `%s` does not read (it is `conveyor %s --%s`'s)", name, cmd.CommandPath(), envVars[i].Command, envVars[i].Flag)
		case envReadBy(cmd, name) == nil:
			bad(s, "sets %s, which no flag of `%s` documents as env $%s", name, cmd.CommandPath(), name)
		}
	}
	if inv.help {
		return
	}
	checkRedisURL := func() {
		u, err := url.Parse(inv.app.redisURL)
		if err != nil {
			bad(s, "Redis URL %q: %v", inv.app.redisURL, err)
			return
		}
		port := u.Port()
		if port == "" {
			port = "6379"
		}
		switch host := u.Hostname(); {
		case isLoopback(host):
			if s.NetworkMode != "host" || redisSvc.NetworkMode != "host" {
				bad(s, "reaches Redis at %s, its own loopback: only with both on the host's network", u.Host)
			}
		case host == redisSvc.Name:
			if s.NetworkMode == "host" {
				bad(s, "on the host's network, which does not resolve the service name %s", host)
			}
		default:
			bad(s, "Redis URL names host %q, which is not the %s service", host, redisSvc.Name)
		}
		if port != redisPort {
			bad(s, "Redis URL port %s, but Redis listens on %s", port, redisPort)
		}
	}
	checkRedisURL()

	switch cmd.Name() {
	case "worker":
		shutdown, _ := cmd.Flags().GetDuration("shutdown-timeout")
		checkGrace(s, shutdown, bad)
		if s.Name == "worker" && (s.Deploy == nil || s.Deploy.Replicas == nil || *s.Deploy.Replicas < 2) {
			bad(s, "fewer than 2 replicas: recovery needs a worker left to recover on")
		}
	case "serve":
		if cmd.Flags().Changed("probe") {
			bad(s, "runs serve --probe, which serves nothing")
			return
		}
		checkServe(s, cmd, env, bad)
	}
	if hc := s.HealthCheck; hc != nil && !hc.Disable && cmd.Name() != "serve" {
		checkProbe(s, hc, "", bad)
	}
}

// checkGrace wants Docker to wait longer than the command's own shutdown timeout before it
// sends SIGKILL.
func checkGrace(s types.ServiceConfig, shutdown time.Duration, bad func(types.ServiceConfig, string, ...any)) {
	grace := 10 * time.Second // Docker's default
	if s.StopGracePeriod != nil {
		grace = time.Duration(*s.StopGracePeriod)
	}
	if grace <= shutdown {
		bad(s, "stop_grace_period %s is not longer than its shutdown timeout %s: Docker kills it mid-shutdown", grace, shutdown)
	}
}

// checkServe checks the API service: serve accepts its address and token, the published ports
// are the one it listens on, and its health check probes that port.
func checkServe(s types.ServiceConfig, cmd *cobra.Command, env map[string]string, bad func(types.ServiceConfig, string, ...any)) {
	f := cmd.Flags()
	sf := serveFlags{tokenGiven: f.Changed("auth-token"), addrGiven: f.Changed("addr")}
	sf.addr, _ = f.GetString("addr")
	sf.token, _ = f.GetString("auth-token")
	sf.insecure, _ = f.GetBool("insecure")
	sf.maxWait, _ = f.GetDuration("max-wait")
	if _, _, err := sf.check(func(k string) string { return env[k] }); err != nil {
		bad(s, "serve refuses its settings: %v", err)
		return
	}
	checkGrace(s, serveShutdownTimeout, bad)
	_, port, _ := net.SplitHostPort(sf.addr)
	if s.NetworkMode == "host" && len(s.Ports) > 0 {
		bad(s, "publishes ports on the host's network")
	}
	if s.NetworkMode != "host" && len(s.Ports) == 0 {
		bad(s, "publishes no port: the dashboard is out of reach")
	}
	for _, pc := range s.Ports {
		if strconv.FormatUint(uint64(pc.Target), 10) != port {
			bad(s, "publishes container port %d, but serve listens on port %s", pc.Target, port)
		}
		if pc.HostIP != "127.0.0.1" {
			bad(s, "publishes port %d on %q, not the host's loopback: the demo token is public", pc.Target, pc.HostIP)
		}
	}
	if hc := s.HealthCheck; hc == nil || hc.Disable {
		bad(s, "no health check")
	} else {
		checkProbe(s, hc, port, bad)
	}
}

// checkProbe wants a health check that runs `conveyor serve --probe URL` (the image has no
// shell or curl), parsed against the command tree; with port set, URL must be on that port.
func checkProbe(s types.ServiceConfig, hc *types.HealthCheckConfig, port string, bad func(types.ServiceConfig, string, ...any)) {
	if len(hc.Test) < 2 || hc.Test[0] != "CMD" || hc.Test[1] != "conveyor" {
		bad(s, "health check %q: the image has no shell or curl; use [CMD, conveyor, serve, --probe, URL]", hc.Test)
		return
	}
	inv, err := parseConveyor(hc.Test[2:], nil)
	if err != nil {
		bad(s, "health check %q: %v", hc.Test, err)
		return
	}
	if inv.cmd.Name() != "serve" || !inv.cmd.Flags().Changed("probe") {
		bad(s, "health check %q is not serve --probe", hc.Test)
		return
	}
	raw, _ := inv.cmd.Flags().GetString("probe")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		bad(s, "health check probes %q, not an http:// URL", raw)
		return
	}
	if !isLoopback(u.Hostname()) {
		bad(s, "health check probes %s, not the container's own loopback", u.Host)
	}
	if port != "" && u.Port() != port {
		bad(s, "health check probes port %s, but serve listens on port %s", u.Port(), port)
	}
	if u.Path != "/readyz" && u.Path != "/healthz" {
		bad(s, "health check probes %s, not /readyz or /healthz (which need no token)", u.Path)
	}
}
