//go:build race

package mutate_test

// The race detector changes allocation counts; TestHotPathBudget skips them.
const raceEnabled = true
