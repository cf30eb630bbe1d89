package main

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// The tests here drive the built binary (buildCLI) as a user would; the commands' unit tests
// are internal/cli's.
func TestMain(m *testing.M) { redistest.Main(m, removeCLI) }
