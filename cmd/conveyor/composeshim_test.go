package main

// The names compose_test.go used while the commands were in this package, over internal/cli's
// hooks: compose_test.go moves to a test module of its own, and this file goes with it.

import (
	"io"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	conveyorcli "github.com/conveyorq/conveyor/internal/cli"
)

type app struct {
	stdin                 io.Reader
	stdout, stderr        io.Writer
	getenv                func(string) string
	log                   zerolog.Logger
	redisURL, redisSource string
	tree                  *conveyorcli.Tree
}

func (a *app) rootCmd() *cobra.Command {
	a.tree = conveyorcli.NewTree(a.stdin, a.getenv)
	return a.tree.Root
}

func (a *app) setup(cmd *cobra.Command, _ []string) error {
	err := a.tree.Setup(cmd)
	a.redisURL = a.tree.RedisURL()
	return err
}

type envVar = conveyorcli.EnvVar

var envVars = conveyorcli.EnvVars()

const (
	defaultRedisURL      = conveyorcli.DefaultRedisURL
	serveShutdownTimeout = conveyorcli.ServeShutdownTimeout
)

var (
	unknownCommandIn = conveyorcli.UnknownCommandIn
	isLoopback       = conveyorcli.IsLoopback
)

type serveFlags struct {
	addr, token           string
	tokenGiven, addrGiven bool
	insecure              bool
	maxWait               time.Duration
}

func (sf *serveFlags) check(getenv func(string) string) (string, bool, error) {
	addr, err := conveyorcli.CheckServe(sf.addr, sf.token, sf.addrGiven, sf.tokenGiven, sf.insecure, sf.maxWait, getenv)
	sf.addr = addr
	return "", false, err
}
