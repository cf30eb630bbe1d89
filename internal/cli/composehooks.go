package cli

import (
	"io"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// What follows exists for the docker-compose test, which checks docker-compose.yml's command
// lines and environment against the real command tree and settings.

// Tree is the command tree as Run builds it, before any command runs.
type Tree struct {
	Root *cobra.Command
	a    *app
}

// NewTree builds the command tree over the environment getenv, as Run does, with no input and
// output discarded.
func NewTree(stdin io.Reader, getenv func(string) string) *Tree {
	a := &app{stdin: stdin, stdout: io.Discard, stderr: io.Discard, getenv: getenv, log: zerolog.Nop(),
		redisURL: defaultRedisURL, redisSource: "the default"}
	return &Tree{Root: a.rootCmd(), a: a}
}

// Setup does what Run does before cmd runs: it checks the required flags, applies the
// environment's global settings and checks them.
func (t *Tree) Setup(cmd *cobra.Command) error { return t.a.setup(cmd, cmd.Flags().Args()) }

// RedisURL is the Redis URL of the settings, after Setup.
func (t *Tree) RedisURL() string { return t.a.redisURL }

// UnknownCommandIn reports a word of args that should name a subcommand and names none, as
// Run does before cobra parses flags.
func UnknownCommandIn(root *cobra.Command, args []string) error { return unknownCommandIn(root, args) }

// EnvVar is an environment variable that the binary reads, and the flag that wins over it.
type EnvVar = envVar

// EnvVars is every environment variable the binary reads.
func EnvVars() []EnvVar { return envVars }

// DefaultRedisURL is the Redis of a command given none.
const DefaultRedisURL = defaultRedisURL

// ServeShutdownTimeout is how long serve drains at SIGTERM.
const ServeShutdownTimeout = serveShutdownTimeout

// IsLoopback reports whether host is a loopback address or localhost.
func IsLoopback(host string) bool { return isLoopback(host) }

// CheckServe checks serve's settings as serve does (given says which of --addr and
// --auth-token were on the command line; the environment fills the others) and returns the
// address it would listen on.
func CheckServe(addr, token string, addrGiven, tokenGiven, insecure bool, maxWait time.Duration, getenv func(string) string) (string, error) {
	sf := serveFlags{addr: addr, token: token, addrGiven: addrGiven, tokenGiven: tokenGiven, insecure: insecure, maxWait: maxWait}
	_, _, err := sf.check(getenv)
	return sf.addr, err
}
