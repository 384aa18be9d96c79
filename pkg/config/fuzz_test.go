package config

import (
	"strings"
	"testing"
)

// referenceDepartmentName is the department rule written out by hand: 1 to 63
// bytes, each a lowercase ASCII letter, a digit or '-', the first and last not '-'.
func referenceDepartmentName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// FuzzDepartmentName checks ValidDepartmentName against the hand-written rule.
func FuzzDepartmentName(f *testing.F) {
	for _, s := range []string{"default", "a", "9", "data-science", strings.Repeat("a", 63), strings.Repeat("a", 64),
		"", "-a", "a-", "Data", "a_b", "a.b", "a\n", "\na", "ä", "a--b", "ﬀ", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidDepartmentName(s), referenceDepartmentName(s); got != want {
			t.Fatalf("ValidDepartmentName(%q) = %v, the rule says %v", s, got, want)
		}
	})
}
