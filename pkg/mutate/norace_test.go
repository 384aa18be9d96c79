//go:build !race

package mutate_test

const raceEnabled = false
