// Package jsontest helps differential tests of JSON decoders.
package jsontest

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Canonical reports whether b is JSON as the API server writes it, where
// encoding/json and an exact-key decoder must agree: a valid value whose
// objects have no two keys equal under case folding, and no key that is a
// case variant of one of fields (a struct field name some decoder matches).
func Canonical(b []byte, fields ...string) bool {
	if !json.Valid(b) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			var seen []string
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return false
				}
				key := k.(string)
				for _, s := range seen {
					if strings.EqualFold(s, key) {
						return false
					}
				}
				for _, f := range fields {
					if key != f && strings.EqualFold(key, f) {
						return false
					}
				}
				seen = append(seen, key)
				if !walk() {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		case json.Delim('['):
			for dec.More() {
				if !walk() {
					return false
				}
			}
			_, err = dec.Token()
			return err == nil
		}
		return true
	}
	return walk()
}
