package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// envSamples are, per flag value type, a value to set through the environment and another to
// give as the flag; a global flag of a new type needs a row here.
var envSamples = map[string][2]string{
	"string": {"from-env", "from-flag"},
	"bool":   {"true", "false"},
	"level":  {"debug", "error"},
	"format": {"json", "console"},
}

// TestEnvVars walks the global flags: each has its environment variable in envVars, its help
// names it, setting the variable sets the flag, and the flag given on the command line wins.
// It also checks that the rows of commands' flags name flags that exist and say so in their
// help, and that the source reads no CONVEYOR_ variable missing from envVars.
func TestEnvVars(t *testing.T) {
	t.Parallel()
	newRoot := func(env map[string]string) *app {
		a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: func(k string) string { return env[k] }}
		return a
	}
	a := newRoot(nil)
	root := a.rootCmd()
	global := map[string]envVar{}
	for _, ev := range envVars {
		if ev.Command == "" {
			global[ev.Flag] = ev
		}
	}
	n := 0
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		n++
		ev, ok := global[f.Name]
		if !ok {
			t.Errorf("--%s has no environment variable in envVars", f.Name)
			return
		}
		require.Contains(t, f.Usage, "env $"+ev.Name, "--%s's help names its variable", f.Name)
		sample, ok := envSamples[f.Value.Type()]
		require.True(t, ok, "--%s: add a sample value of type %s to envSamples", f.Name, f.Value.Type())

		t.Run(f.Name, func(t *testing.T) {
			// The variable sets the flag.
			a := newRoot(map[string]string{ev.Name: sample[0]})
			root := a.rootCmd()
			require.NoError(t, root.ParseFlags(nil))
			require.Empty(t, a.applyEnv(root))
			require.Equal(t, sample[0], root.Flags().Lookup(f.Name).Value.String())
			require.Equal(t, "$"+ev.Name, a.source(f.Name))

			// The flag wins.
			a = newRoot(map[string]string{ev.Name: sample[0]})
			root = a.rootCmd()
			require.NoError(t, root.ParseFlags([]string{"--" + f.Name + "=" + sample[1]}))
			require.Empty(t, a.applyEnv(root))
			require.Equal(t, sample[1], root.Flags().Lookup(f.Name).Value.String())
			require.Equal(t, "--"+f.Name, a.source(f.Name))
		})
	})
	require.Equal(t, len(global), n, "every global row of envVars names a global flag")

	for _, ev := range envVars {
		if ev.Command == "" {
			continue
		}
		c, _, err := root.Find([]string{ev.Command})
		require.NoError(t, err)
		f := c.Flags().Lookup(ev.Flag)
		require.NotNil(t, f, "%s --%s", ev.Command, ev.Flag)
		require.Contains(t, f.Usage, "env $"+ev.Name, "%s --%s's help names its variable", ev.Command, ev.Flag)
	}

	// Every CONVEYOR_ variable named in the package's source is listed.
	names := make([]string, len(envVars))
	for i, ev := range envVars {
		names[i] = ev.Name
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	quoted := regexp.MustCompile(`"(CONVEYOR_[A-Z0-9_]+)"`)
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range quoted.FindAllStringSubmatch(string(src), -1) {
			require.True(t, slices.Contains(names, m[1]), "%s reads %s, which envVars does not list", file, m[1])
		}
	}
}
