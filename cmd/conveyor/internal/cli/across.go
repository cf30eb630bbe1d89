package cli

import (
	"github.com/spf13/cobra"
)

// allQueuesName is the --queue value that means every queue, as --all-queues does.
const allQueuesName = "*"

// addAllQueuesFlag adds --all-queues, which what says the command does across queues.
func addAllQueuesFlag(cmd *cobra.Command, all *bool, what string) {
	cmd.Flags().BoolVar(all, "all-queues", false, what+" of every known queue (as --queue '*')")
}

// acrossQueues reports whether a command runs across every known queue: --all-queues, or
// --queue '*'. Both with another --queue is a usage error.
func acrossQueues(cmd *cobra.Command, queue string, all bool) (bool, error) {
	if all && cmd.Flags().Changed("queue") && queue != allQueuesName {
		return false, usageErrorf("--all-queues and --queue cannot be used together")
	}
	return all || queue == allQueuesName, nil
}
