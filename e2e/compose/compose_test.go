package compose_test

// The test of docker-compose.yml (and of it with the test override docker-compose.e2e.yml):
// it loads them with the Compose specification's own loader, which validates them against the
// Compose schema, then checks every service that runs the conveyor image against the real
// binary (binary_test.go): its command and health check are command lines the binary accepts
// (an unknown command or flag, a stray argument or a malformed variable fails), every
// environment variable it sets is a CONVEYOR_* variable that its command's help says it reads,
// and the ports, health checks and depends_on agree with what the commands listen on and
// connect to.
//
// It lives in the e2e module so that github.com/compose-spec/compose-go/v2 is no requirement
// of the library's go.mod. scripts/compose-e2e.sh runs the same files for real.

import (
	"context"
	"errors"
	"fmt"
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
		tr, err := commandTree()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range tr.variables() {
			if !strings.Contains(docker, "`"+name+"`") {
				t.Errorf("README.md's With Docker section does not list %s (the binary's help names it)", name)
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

// isConveyorService reports whether s runs the image built from this repository's Dockerfile
// (whose entrypoint is conveyor).
func isConveyorService(p *types.Project, s types.ServiceConfig) bool {
	return s.Build != nil && filepath.Clean(s.Build.Context) == filepath.Clean(p.WorkingDir)
}

// checkCompose checks the loaded project; it returns every problem found.
func checkCompose(p *types.Project) []error {
	var errs []error
	tr, err := commandTree()
	if err != nil {
		return []error{err}
	}
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
		checkConveyorService(tr, s, redisSvc, redisPort, bad)
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
func checkConveyorService(tr *cliTree, s, redisSvc types.ServiceConfig, redisPort string, bad func(types.ServiceConfig, string, ...any)) {
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
	inv := newInvocation(tr, s.Command, env)
	for name := range env {
		cmd, flag, ok := tr.owner(name)
		switch {
		case !ok:
			bad(s, "sets %s, which the binary does not read (no flag's help says env $%s)", name, name)
		case cmd != "" && cmd != inv.cmd:
			bad(s, "sets %s, which `%s` does not read (it is `conveyor %s --%s`'s)", name, inv.path(), cmd, flag)
		}
	}
	if inv.cmd == "serve" && inv.given("probe") {
		bad(s, "runs serve --probe, which serves nothing")
		return
	}
	if err := inv.usageError(); err != nil {
		bad(s, "command %q: %v", s.Command, err)
		return
	}
	if inv.given("help") || slices.Contains(inv.args, "-h") {
		return // it prints the help and exits 0, connecting nowhere
	}
	checkRedisURL := func() {
		raw := inv.setting("redis")
		u, err := url.Parse(raw)
		if err != nil {
			bad(s, "Redis URL %q: %v", raw, err)
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

	switch inv.cmd {
	case "worker":
		shutdown, err := time.ParseDuration(inv.setting("shutdown-timeout"))
		if err != nil {
			bad(s, "worker --shutdown-timeout: %v", err)
		}
		checkGrace(s, shutdown, bad)
		if s.Name == "worker" && (s.Deploy == nil || s.Deploy.Replicas == nil || *s.Deploy.Replicas < 2) {
			bad(s, "fewer than 2 replicas: recovery needs a worker left to recover on")
		}
	case "serve":
		checkServe(tr, s, inv, bad)
	}
	if hc := s.HealthCheck; hc != nil && !hc.Disable && inv.cmd != "serve" {
		checkProbe(tr, s, hc, "", bad)
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

// serveShutdownTimeout is how long serve finishes requests after SIGTERM (cmd/conveyor's
// serve.go); its help does not show it.
const serveShutdownTimeout = 30 * time.Second

// checkServe checks the API service (the binary has accepted its address and token): the
// published ports are the one it listens on, and its health check probes that port.
func checkServe(tr *cliTree, s types.ServiceConfig, inv invocation, bad func(types.ServiceConfig, string, ...any)) {
	checkGrace(s, serveShutdownTimeout, bad)
	_, port, _ := net.SplitHostPort(inv.setting("addr"))
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
		checkProbe(tr, s, hc, port, bad)
	}
}

// checkProbe wants a health check that runs `conveyor serve --probe URL` (the image has no
// shell or curl), accepted by the binary; with port set, URL must be on that port.
func checkProbe(tr *cliTree, s types.ServiceConfig, hc *types.HealthCheckConfig, port string, bad func(types.ServiceConfig, string, ...any)) {
	if len(hc.Test) < 2 || hc.Test[0] != "CMD" || hc.Test[1] != "conveyor" {
		bad(s, "health check %q: the image has no shell or curl; use [CMD, conveyor, serve, --probe, URL]", hc.Test)
		return
	}
	inv := newInvocation(tr, hc.Test[2:], nil)
	if inv.cmd != "serve" || !inv.given("probe") {
		bad(s, "health check %q is not serve --probe", hc.Test)
		return
	}
	if err := inv.usageError(); err != nil {
		bad(s, "health check %q: %v", hc.Test, err)
		return
	}
	raw := inv.setting("probe")
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
