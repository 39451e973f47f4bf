package nixlwire

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CompatibilityHash returns vLLM's compatibility hash of factors: the
// lower-case hex SHA-256 of the UTF-8 bytes of Python's
// json.dumps(factors, sort_keys=True), as rendered by [PythonJSON].
func CompatibilityHash(factors map[string]any) (string, error) {
	b, err := PythonJSON(factors)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// maxJSONDepth bounds PythonJSON's recursion (Python's own limit is about
// 1000 levels).
const maxJSONDepth = 100

// PythonJSON returns the bytes Python's json.dumps(v, sort_keys=True)
// produces for the equivalent Python value, with its defaults: separators
// ", " and ": ", ensure_ascii (every character outside printable ASCII
// escaped as \uXXXX in lower-case hex, with a surrogate pair above U+FFFF),
// allow_nan (NaN, Infinity, -Infinity), and map keys sorted by code point.
//
// Supported values: nil (null), bool, string (must be valid UTF-8), every
// integer type, float64 and float32 (rendered as Python's float repr, e.g.
// 1.0, 1e-05, 1e+16, after converting a float32 to float64), slices and
// arrays (lists; []byte is refused, as Python cannot serialize bytes), maps
// with string keys (dicts), and pointers and interfaces to those. A nil
// pointer, interface, slice or map is null (Python None), as with
// encoding/json; use an empty non-nil slice or map for [] or {}. Anything else, invalid UTF-8 or nesting deeper than 100 levels is
// an error.
func PythonJSON(v any) ([]byte, error) {
	return appendPyJSON(nil, reflect.ValueOf(v), 0)
}

var (
	errJSONDepth = errors.New("nixlwire: PythonJSON: nesting deeper than 100 levels")
	errJSONUTF8  = errors.New("nixlwire: PythonJSON: string is not valid UTF-8")
)

func appendPyJSON(b []byte, v reflect.Value, depth int) ([]byte, error) {
	if depth > maxJSONDepth {
		return nil, errJSONDepth
	}
	if !v.IsValid() {
		return append(b, "null"...), nil
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(b, v.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return appendPyFloat(b, v.Float()), nil
	case reflect.String:
		return appendPyString(b, v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		return appendPyJSON(b, v.Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return nil, errors.New("nixlwire: PythonJSON: []byte is not JSON serializable")
		}
		if v.Kind() == reflect.Slice && v.IsNil() {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = appendPyJSON(b, v.Index(i), depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return nil, errors.New("nixlwire: PythonJSON: map keys must be strings, got " + v.Type().Key().String())
		}
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		keys := v.MapKeys()
		// Byte order of valid UTF-8 is code-point order, which is how
		// Python sorts str keys.
		slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			var err error
			if b, err = appendPyString(b, k.String()); err != nil {
				return nil, err
			}
			b = append(b, ": "...)
			if b, err = appendPyJSON(b, v.MapIndex(k), depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, errors.New("nixlwire: PythonJSON: unsupported type " + v.Type().String())
}

const lowerHex = "0123456789abcdef"

// appendPyString appends s as json.dumps with ensure_ascii=True does.
func appendPyString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, errJSONUTF8
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, '\\', '"')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r >= 0x20 && r <= 0x7e:
			b = append(b, byte(r))
		case r > 0xffff:
			r -= 0x10000
			b = appendU4(b, 0xd800|(r>>10)&0x3ff)
			b = appendU4(b, 0xdc00|r&0x3ff)
		default:
			b = appendU4(b, r)
		}
	}
	return append(b, '"'), nil
}

func appendU4(b []byte, r rune) []byte {
	return append(b, '\\', 'u', lowerHex[r>>12&0xf], lowerHex[r>>8&0xf], lowerHex[r>>4&0xf], lowerHex[r&0xf])
}

// appendPyFloat appends f as Python's float repr (which json.dumps uses):
// the shortest digits that round-trip, in positional notation when the
// decimal exponent is in [-4, 16), with ".0" added to integral values, and
// in scientific notation otherwise, with a sign and at least two exponent
// digits ("1e-05", "1.5e+16").
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	// e is [-]d[.ddd]e±XX; its exponent is the decimal exponent.
	i := len(e) - 1
	for e[i] != 'e' {
		i--
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	if f == 0 || (exp >= -4 && exp < 16) {
		start := len(b)
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
		for _, c := range b[start:] {
			if c == '.' {
				return b
			}
		}
		return append(b, '.', '0')
	}
	return append(b, e...)
}
