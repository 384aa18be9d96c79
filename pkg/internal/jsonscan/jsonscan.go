// Package jsonscan validates JSON (Valid, the same verdict as json.Valid)
// and walks validated JSON without allocating: it finds the members of
// objects and the elements of arrays as raw byte slices and decodes strings
// with encoding/json's rules.
//
// It exists for the admission hot path. encoding/json validates its whole
// input and then scans it again to skip every field it does not decode, so
// an AdmissionReview decoded in two steps (envelope, then pod) is scanned
// four times with its byte-at-a-time state machine; with this package each
// step validates with a plain recursive descent and walks with plain loops
// (see pkg/mutate benchmarks).
//
// Keys match exactly, as in the API server's own decoder (sigs.k8s.io/json),
// not case-insensitively as in encoding/json; the API server only ever sends
// its own canonical encoding, where the two agree. Every function checks
// bounds, so invalid input yields an error, never a panic.
package jsonscan

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// ErrMalformed is returned for input that is not the JSON the caller expected.
var ErrMalformed = errors.New("malformed JSON")

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// Valid reports whether b is one valid JSON value, exactly as json.Valid
// does (it does not check that strings are valid UTF-8, as json.Valid does
// not), several times faster.
func Valid(b []byte) bool {
	i, ok := validValue(b, skipSpace(b, 0), 0)
	return ok && skipSpace(b, i) == len(b)
}

func validValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{':
		if depth+1 > maxDepth {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			var ok bool
			if i, ok = validString(b, i); !ok {
				return 0, false
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			if i, ok = validValue(b, skipSpace(b, i+1), depth+1); !ok {
				return 0, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case '}':
				return i + 1, true
			default:
				return 0, false
			}
		}
	case c == '[':
		if depth+1 > maxDepth {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = validValue(b, i, depth+1); !ok {
				return 0, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1, true
			default:
				return 0, false
			}
		}
	case c == '"':
		return validString(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return validNumber(b, i)
	}
	return 0, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return 0, false
}

// validString checks the string starting at b[i] == '"': no control
// characters, only JSON's escapes.
func validString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, true
		case c == '\\':
			if j+1 >= len(b) {
				return 0, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) {
					return 0, false
				}
				for _, h := range b[j+2 : j+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return 0, false
					}
				}
				j += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		default:
			j++
		}
	}
	return 0, false
}

// validNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func validNumber(b []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i + 1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// Kind returns the first byte of the value in b, which tells its type:
// '{', '[', '"', 'n' (null), 't' or 'f' (booleans), or a number's first
// byte; 0 for an empty value.
func Kind(b []byte) byte {
	i := skipSpace(b, 0)
	if i >= len(b) {
		return 0
	}
	return b[i]
}

// IsNull reports whether b is the literal null.
func IsNull(b []byte) bool {
	i := skipSpace(b, 0)
	return len(b)-i >= 4 && string(b[i:i+4]) == "null"
}

// Iter walks the members of an object or the elements of an array.
type Iter struct {
	b        []byte
	i        int
	obj      bool
	key, val []byte
	err      error
	done     bool
}

// Object returns an iterator over the members of the object b; Err reports
// an error if b is not an object.
func Object(b []byte) Iter { return start(b, '{') }

// Array returns an iterator over the elements of the array b; Err reports an
// error if b is not an array.
func Array(b []byte) Iter { return start(b, '[') }

func start(b []byte, open byte) Iter {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != open {
		return Iter{err: ErrMalformed, done: true}
	}
	return Iter{b: b, i: i + 1, obj: open == '{'}
}

// Next moves to the next member or element and reports whether there is one.
func (it *Iter) Next() bool {
	if it.done {
		return false
	}
	b := it.b
	i := skipSpace(b, it.i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) {
		return it.fail()
	}
	if b[i] == '}' || b[i] == ']' {
		it.done = true
		return false
	}
	if it.obj {
		if b[i] != '"' {
			return it.fail()
		}
		end, ok := stringEnd(b, i)
		if !ok {
			return it.fail()
		}
		it.key = b[i:end]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return it.fail()
		}
		i = skipSpace(b, i+1)
	}
	end, ok := valueEnd(b, i)
	if !ok {
		return it.fail()
	}
	it.val = b[i:end]
	it.i = end
	return true
}

func (it *Iter) fail() bool {
	it.err, it.done = ErrMalformed, true
	return false
}

// Key is the current member's key, still quoted and escaped (see KeyIs).
func (it *Iter) Key() []byte { return it.key }

// Value is the current member's or element's raw value.
func (it *Iter) Value() []byte { return it.val }

// Err is the error that ended the walk, if any.
func (it *Iter) Err() error { return it.err }

// KeyIs reports whether the quoted key is s once unescaped.
func KeyIs(quoted []byte, s string) bool {
	if len(quoted) == len(s)+2 && string(quoted[1:len(quoted)-1]) == s {
		return true
	}
	for _, c := range quoted {
		if c == '\\' {
			k, err := String(quoted)
			return err == nil && k == s
		}
	}
	return false
}

// String decodes a JSON string as encoding/json does (escapes resolved,
// invalid UTF-8 replaced by U+FFFD). A string without escapes is one
// allocation; others go through encoding/json.
func String(b []byte) (string, error) {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		in := b[1 : len(b)-1]
		simple, ascii := true, true
		for _, c := range in {
			if c < 0x20 || c == '\\' || c == '"' {
				simple = false
				break
			}
			if c >= utf8.RuneSelf {
				ascii = false
			}
		}
		if simple && (ascii || utf8.Valid(in)) {
			return string(in), nil
		}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", err
	}
	return s, nil
}

// Bool decodes true or false.
func Bool(b []byte) (bool, error) {
	i := skipSpace(b, 0)
	switch {
	case len(b)-i >= 4 && string(b[i:i+4]) == "true":
		return true, nil
	case len(b)-i >= 5 && string(b[i:i+5]) == "false":
		return false, nil
	}
	return false, ErrMalformed
}

// StringMap decodes an object of strings into m (made when nil) and returns
// it, as encoding/json decodes into a map[string]string: a null value is
// stored as "", any other non-string value is an error.
func StringMap(b []byte, m map[string]string) (map[string]string, error) {
	it := Object(b)
	if it.Err() != nil {
		return m, it.Err()
	}
	if m == nil {
		m = make(map[string]string, countMembers(b))
	}
	for it.Next() {
		k, err := String(it.Key())
		if err != nil {
			return m, err
		}
		v := ""
		if !IsNull(it.Value()) {
			if Kind(it.Value()) != '"' {
				return m, ErrMalformed
			}
			if v, err = String(it.Value()); err != nil {
				return m, err
			}
		}
		m[k] = v
	}
	return m, it.Err()
}

// countMembers is a quick upper bound on an object's member count, to size
// maps: the number of top-level commas plus one.
func countMembers(b []byte) int {
	n, depth := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			end, ok := stringEnd(b, i)
			if !ok {
				return n + 1
			}
			i = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				n++
			}
		}
	}
	return n + 1
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string starting at b[i] == '"'.
// Strings in Kubernetes objects are short, so a plain loop beats
// bytes.IndexByte's call overhead.
func stringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// valueEnd returns the index after the value starting at b[i].
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := stringEnd(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	case ',', '}', ']', ':':
		return 0, false
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j, true
		}
		j++
	}
	return j, true
}
