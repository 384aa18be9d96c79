//go:build chaos

package e2e

import "testing"

// TestFaultMatrixFull runs every fault against every operation (54 cells;
// `make chaos`). TestFaultMatrix, in `make test`, is its subset.
func TestFaultMatrixFull(t *testing.T) {
	skipWithoutSimulator(t)
	m := newMatrix(t, "e2e-fmx-")
	for _, op := range matrixOps {
		for _, f := range matrixFaults {
			m.run(op, f)
		}
	}
}
