package keyring_test

import (
	"fmt"

	"github.com/conveyorq/conveyor/keyring"
)

func Example() {
	// In production the text comes from a file (keyring.Load) or $CONVEYOR_KEYS
	// (keyring.FromEnv); conveyor keys new prints a line.
	k, err := keyring.Parse("k2 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\nk1 AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	if err != nil {
		panic(err)
	}
	sealed := k.Seal(keyring.Payload, "job-1", []byte(`{"card":"4242"}`))
	fmt.Println(keyring.Describe(sealed))
	plain, err := k.Open(keyring.Payload, "job-1", sealed)
	fmt.Println(string(plain), err)
	// Output:
	// <encrypted, 15 bytes, key k2>
	// {"card":"4242"} <nil>
}
