// Command nkid checks the natural-key golden vectors against the Go implementation.
//
//	go run ./cmd/nkid ../../tests/vectors/ids.json
//
// It prints "ok N vectors", or one line per mismatch and exits 1.
package main

import (
	"fmt"
	"os"

	"github.com/natural-key/natural-key/interop/go/internal/vectors"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nkid path/to/ids.json")
		os.Exit(2)
	}
	vs, err := vectors.Load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nkid:", err)
		os.Exit(2)
	}
	bad := 0
	for _, v := range vs {
		for _, err := range v.Check() {
			fmt.Println("MISMATCH", err)
			bad++
		}
	}
	if bad > 0 {
		fmt.Printf("FAIL %d mismatches in %d vectors\n", bad, len(vs))
		os.Exit(1)
	}
	fmt.Printf("ok %d vectors\n", len(vs))
}
