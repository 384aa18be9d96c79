package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var samples = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e-3`, `-12E+4`, `"a"`, `""`,
	` { "a" : [ 1 , 2 , { "b" : null } ] , "c" : "\"\\\/\b\f\n\r\t\u00e9" } `,
	`{"a":{"a":{"a":[[[]]]}}}`, `"\ud800"`, "\"\xff\xfe\"", `{"k\"ey":"v"}`,
	// invalid
	``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.5`, `1e`, `-`, `+1`, `tru`, `nul`, `"abc`,
	"\"a\x01\"", `"\x"`, `"\u12"`, `"\u12g4"`, `[1 2]`, `{"a":1}{}`, `{"a":1} x`, `[`, `"\`,
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, s := range samples {
		assert.Equal(t, json.Valid([]byte(s)), Valid([]byte(s)), "%q", s)
	}
}

func TestValidDepthLimit(t *testing.T) {
	deep := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	assert.True(t, Valid(deep(10000)))
	assert.Equal(t, json.Valid(deep(10000)), Valid(deep(10000)))
	assert.False(t, Valid(deep(10001)))
	assert.Equal(t, json.Valid(deep(10001)), Valid(deep(10001)))
}

// walk rebuilds a decoded value from the raw walk, as json.Unmarshal into an
// any (with UseNumber) would: it checks Iter, String, Kind and IsNull.
func walk(t *testing.T, b []byte) any {
	t.Helper()
	switch Kind(b) {
	case '{':
		m := map[string]any{}
		it := Object(b)
		for it.Next() {
			k, err := String(it.Key())
			require.NoError(t, err)
			m[k] = walk(t, it.Value())
		}
		require.NoError(t, it.Err())
		return m
	case '[':
		a := []any{}
		it := Array(b)
		for it.Next() {
			a = append(a, walk(t, it.Value()))
		}
		require.NoError(t, it.Err())
		return a
	case '"':
		s, err := String(b)
		require.NoError(t, err)
		return s
	case 'n':
		require.True(t, IsNull(b))
		return nil
	case 't', 'f':
		v, err := Bool(b)
		require.NoError(t, err)
		return v
	}
	return json.Number(bytes.TrimSpace(b))
}

func reference(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v))
	return v
}

func TestWalkMatchesEncodingJSON(t *testing.T) {
	for _, s := range samples {
		if json.Valid([]byte(s)) {
			assert.Equal(t, reference(t, []byte(s)), walk(t, []byte(s)), "%q", s)
		}
	}
}

func TestKeyIs(t *testing.T) {
	assert.True(t, KeyIs([]byte(`"metadata"`), "metadata"))
	assert.True(t, KeyIs([]byte(`"meta\u0064ata"`), "metadata"))
	assert.True(t, KeyIs([]byte(`"nvidia.com\/gpu"`), "nvidia.com/gpu"))
	assert.False(t, KeyIs([]byte(`"Metadata"`), "metadata"), "exact, as the API server")
	assert.False(t, KeyIs([]byte(`"metadat"`), "metadata"))
	assert.False(t, KeyIs([]byte(`"meta\"data"`), "metadata"))
}

func TestStringMap(t *testing.T) {
	m, err := StringMap([]byte(`{"a":"1","b":null,"a":"2"}`), nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "2", "b": ""}, m, "null is \"\", the last duplicate wins (as encoding/json)")
	m, err = StringMap([]byte(`{"c":"3"}`), m)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "2", "b": "", "c": "3"}, m, "adds to an existing map (as encoding/json)")
	_, err = StringMap([]byte(`{"a":1}`), nil)
	assert.Error(t, err)
	_, err = StringMap([]byte(`[]`), nil)
	assert.Error(t, err)
}

func TestInvalidInputNeverPanics(t *testing.T) {
	for _, s := range samples {
		b := []byte(s)
		_ = walkLoose(b)
	}
}

// walkLoose walks anything without assuming validity; it must not panic.
func walkLoose(b []byte) int {
	n := 0
	for _, it := range []Iter{Object(b), Array(b)} {
		for it.Next() {
			n++
			_, _ = String(it.Key())
			n += walkLoose(it.Value())
		}
	}
	_, _ = String(b)
	_, _ = Bool(b)
	_ = IsNull(b)
	_, _ = StringMap(b, nil)
	return n
}

// FuzzValid: Valid agrees with json.Valid on every input, and on valid
// input the walk rebuilds what encoding/json decodes; on any input the
// walkers never panic.
func FuzzValid(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b)
		if got := Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
		_ = walkLoose(b)
		if want {
			if got, ref := walk(t, b), reference(t, b); !reflect.DeepEqual(got, ref) {
				t.Fatalf("walk(%q) = %#v, encoding/json %#v", b, got, ref)
			}
		}
	})
}
