package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func init() { addCommand(newVersionCmd) }

// versionInfo is what `conveyor version --json` prints: the module version and the VCS
// revision the binary was built from, as the Go toolchain recorded them. Fields it did not
// record are empty (omitted in JSON).
type versionInfo struct {
	// Version is the main module's version: the tag (v1.2.0) or pseudo-version of 'go install
	// module@version'; for a 'go build' in a git checkout, a pseudo-version of the commit
	// (v0.0.0-20261126085259-7f6339efeb33, with +dirty when modified); "(devel)" when the build
	// recorded no VCS information ('go run', 'go test', -buildvcs=false).
	Version string `json:"version"`
	// Module is the main module's path.
	Module string `json:"module,omitempty"`
	// Commit is the VCS revision (vcs.revision) of a 'go build' in a checkout.
	Commit string `json:"commit,omitempty"`
	// CommitTime is the revision's commit time (vcs.time), RFC 3339 in UTC.
	CommitTime string `json:"commit_time,omitempty"`
	// Modified reports uncommitted changes in the checkout at build time (vcs.modified).
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary; Platform is GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// readVersion reads the binary's build information. A binary built without it (rare: it is
// recorded by default) reports "(unknown)".
func readVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module = bi.Main.Path
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	v.Go = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the human form, one line: "conveyor v1.2.0 (commit 0123abcd…, 2026-11-26T08:48:55Z,
// modified; go1.26.0 linux/amd64)". A binary built by 'go run' or 'go test', or outside a
// checkout, or with -buildvcs=false, records no commit: "conveyor (devel) (commit unknown;
// go1.26.0 linux/amd64)".
func (v versionInfo) String() string {
	var parts []string
	if v.Commit != "" {
		parts = append(parts, "commit "+v.Commit)
	} else {
		parts = append(parts, "commit unknown")
	}
	if v.CommitTime != "" {
		parts = append(parts, v.CommitTime)
	}
	if v.Modified {
		parts = append(parts, "modified")
	}
	return fmt.Sprintf("conveyor %s (%s; %s %s)", v.Version, strings.Join(parts, ", "), v.Go, v.Platform)
}

func newVersionCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version and the commit the binary was built from",
		Long: `Print Conveyor's version and what the Go toolchain recorded of the build: the module version,
the VCS commit, its time and whether the checkout had uncommitted changes ("modified"), and the
Go version and platform. 'go install github.com/conveyorq/conveyor/cmd/conveyor@v1.2.0' records
the tag; 'go build' in a git checkout records the commit and a pseudo-version made of it
(v0.0.0-<commit time>-<commit>, +dirty when modified); 'go run', 'go test' and
-buildvcs=false record neither: the version is "(devel)" and the commit "unknown".
'conveyor --version' prints the same line.

With --json it prints {"version", "module", "commit", "commit_time", "modified", "go",
"platform"}, leaving out what was not recorded. It needs no Redis.`,
		Example: `  conveyor version
  conveyor --version
  conveyor version --json | jq -r .commit`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			v := readVersion()
			if asJSON {
				return writeJSON(a.stdout, v)
			}
			_, err := fmt.Fprintln(a.stdout, v)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return cmd
}

// setVersionFlag gives the root command a --version flag (cobra's, with -v) that prints the
// line 'conveyor version' prints.
func setVersionFlag(root *cobra.Command) {
	v := readVersion()
	root.Version = v.Version
	root.SetVersionTemplate(v.String() + "\n")
}
