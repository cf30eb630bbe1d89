package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/keyring"
)

func init() { addCommand(newKeysCmd) }

// keysSubcommands are the subcommands of 'conveyor keys'. A subcommand's file adds itself
// from its init (as the root's commands do), so that one is one new file.
var keysSubcommands = []func(*app) *cobra.Command{newKeysNewCmd}

func newKeysCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Make the keys of encryption at rest",
		Long: `Encryption at rest seals every job's payload and result with AES-256-GCM under the first key
of a key file (--keys FILE, or the file's text in $` + envKeys + `); any key listed opens what was
sealed under it. A key file has one key a line, "ID BASE64-KEY"; blank lines and lines starting
with # are skipped. Give the same file to every worker, publisher, serve and relay. The type and
the metadata of a job stay plain: put no secret in metadata. See "Encryption at rest" in the
README.`,
		Example: `  conveyor keys new k1 > conveyor.keys && chmod 600 conveyor.keys
  conveyor --keys conveyor.keys worker --queue emails`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	for _, sub := range keysSubcommands {
		cmd.AddCommand(sub(a))
	}
	return cmd
}

func newKeysNewCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "new ID",
		Short: "Print a key file line with a new random key",
		Long: `Print a key file line "ID BASE64-KEY" with 32 random bytes from the system's source. The id
is 1 to 64 letters, digits, '.', '_' or '-'; it is stored beside every value sealed under the
key, and shown to readers without it ("<encrypted, N bytes, key ID>"). To start encrypting, or
to rotate, put the line first in the key file of every process (the first key seals, all open),
then re-seal what is stored with 'conveyor keys rotate'.`,
		Example: `  conveyor keys new k1 >> conveyor.keys`,
		Args:    exactlyOne("key id"),
		RunE: func(_ *cobra.Command, args []string) error {
			line, err := keyring.NewLine(args[0])
			if err != nil {
				return usageErrorf("%v", err)
			}
			_, err = fmt.Fprintln(a.stdout, line)
			return err
		},
	}
}
