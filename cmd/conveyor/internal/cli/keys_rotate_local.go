package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/keyring"
)

// The 'keys' command group as this file has it: 'keys rotate', whose keyring is its own
// --keys flag or, without it, the keyring package's variable. A keys group with a global
// --keys flag replaces this file: newKeysRotateCmd takes the keyring from a function.

func init() {
	addCommand(func(a *app) *cobra.Command {
		keys := &cobra.Command{
			Use:   "keys",
			Short: "Manage the keys that encrypt payloads and results at rest",
			Args:  unknownSubcommand,
			RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		}
		var file string
		rotate := newKeysRotateCmd(a, func(cmd *cobra.Command) (*keyring.Keyring, error) { return localKeyring(a, file) })
		rotate.Flags().StringVar(&file, "keys", "", "key file, one 'ID BASE64-KEY' a line, the newest first (default $"+keyring.EnvVar+")")
		keys.AddCommand(rotate)
		return keys
	})
}

// localKeyring reads the key file, or the keyring package's variable without one; neither is
// a usage error.
func localKeyring(a *app, file string) (*keyring.Keyring, error) {
	if file != "" {
		k, err := keyring.Load(file)
		if err != nil {
			return nil, usageErrorf("--keys: %v", err)
		}
		return k, nil
	}
	v := a.getenv(keyring.EnvVar)
	if strings.TrimSpace(v) == "" {
		return nil, usageErrorf("no keys: give --keys FILE or set $%s (the newest key first)", keyring.EnvVar)
	}
	k, err := keyring.Parse(v)
	if err != nil {
		return nil, usageErrorf("$%s: %v", keyring.EnvVar, err)
	}
	return k, nil
}
