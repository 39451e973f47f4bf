package handshake

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

	"github.com/zmqguard/zmqguard/vllm"
)

// Factors is the set of values vLLM hashes into its NIXL compatibility hash
// (compute_nixl_compatibility_hash). Two engines complete a handshake only
// when their hashes are equal (unless the check is disabled on the
// receiving side), so the key set and the connector version must be
// exactly those of the vLLM release on the other side: Release selects
// them (see [vllm.Rules]). TP size, block size and KV cache
// layout are deliberately not factors: vLLM checks them after the
// handshake, so heterogeneous deployments can pair.
//
// The factor sets by release (vLLM's nixl/metadata.py):
//
//   - every profile: vllm_version, nixl_connector_version, model, dtype,
//     num_kv_heads, head_size, num_hidden_layers, attn_backend_name,
//     cache_dtype, cross_layers_blocks, is_hma_enabled;
//   - since connector version 6 (vLLM PR #49230): speculative_config;
//   - since connector version 7 (vLLM PR #50620): transfer_mode.
type Factors struct {
	// Release is the vLLM release whose factor set and connector version
	// are hashed; the zero value is vllm.Latest.
	Release vllm.Release
	// VLLMVersion is vllm.__version__, e.g. "0.26.0" (key vllm_version).
	VLLMVersion string
	// ConnectorVersion is NIXL_CONNECTOR_VERSION (key
	// nixl_connector_version); zero means the release's
	// (Release.Rules().NixlConnectorVersion: 5 for 0.25 and 0.26, 7 for
	// latest). Set it only to pair with a build whose version differs
	// from its release's.
	ConnectorVersion int
	// Model is the model name or path as configured (key model).
	Model string
	// Dtype is str(model_config.dtype), e.g. "torch.bfloat16" (key dtype).
	Dtype string
	// NumKVHeads is the model's total number of KV heads (key
	// num_kv_heads).
	NumKVHeads int
	// HeadSize is the attention head size (key head_size).
	HeadSize int
	// NumHiddenLayers is the model's total number of hidden layers (key
	// num_hidden_layers).
	NumHiddenLayers int
	// AttnBackendName names the attention backend (key attn_backend_name).
	AttnBackendName string
	// CacheDtype is str(cache_config.cache_dtype), e.g. "auto" (key
	// cache_dtype).
	CacheDtype string
	// CrossLayersBlocks is the cross_layers_blocks argument vLLM's worker
	// passes (true when the KV cache of all layers is registered as one
	// cross-layer block tensor) (key cross_layers_blocks).
	CrossLayersBlocks bool
	// IsHMAEnabled is true unless the hybrid KV cache manager is disabled
	// (key is_hma_enabled).
	IsHMAEnabled bool
	// SpeculativeConfig is nil (Python None) unless an EAGLE/MTP-style
	// speculator is configured; then vLLM hashes a dict with the keys
	// method, model, revision, code_revision, parallel_drafting,
	// kv_cache_dtype and auxiliary_layer_ids (a list of ints or None). The
	// values are rendered as by [PythonJSON] (key speculative_config,
	// hashed since connector version 6).
	SpeculativeConfig map[string]any
	// TransferMode is "pull" (READ, the default when empty) or "push"
	// (WRITE) (key transfer_mode, hashed since connector version 7).
	TransferMode string
	// Extra holds further keys, added to (or replacing) the ones above in
	// Map, for forks and builds whose factor set differs from their
	// release's. To hash a set with fewer keys, delete them from Map's
	// result and call [CompatibilityHash].
	Extra map[string]any
}

// Map returns a new map of the factors as the dict the release's vLLM
// hashes: exactly the keys of nixlFactorKeys(Release.Rules()), then
// Extra's keys.
func (f *Factors) Map() map[string]any {
	rules := f.Release.Rules()
	version := f.ConnectorVersion
	if version == 0 {
		version = rules.NixlConnectorVersion
	}
	m := map[string]any{
		"vllm_version":           f.VLLMVersion,
		"nixl_connector_version": version,
		"model":                  f.Model,
		"dtype":                  f.Dtype,
		"num_kv_heads":           f.NumKVHeads,
		"head_size":              f.HeadSize,
		"num_hidden_layers":      f.NumHiddenLayers,
		"attn_backend_name":      f.AttnBackendName,
		"cache_dtype":            f.CacheDtype,
		"is_hma_enabled":         f.IsHMAEnabled,
	}
	if rules.NixlHashCrossLayersBlocks {
		m["cross_layers_blocks"] = f.CrossLayersBlocks
	}
	if rules.NixlHashSpeculativeConfig {
		var spec any
		if f.SpeculativeConfig != nil {
			spec = f.SpeculativeConfig
		}
		m["speculative_config"] = spec
	}
	if rules.NixlHashTransferMode {
		mode := f.TransferMode
		if mode == "" {
			mode = "pull"
		}
		m["transfer_mode"] = mode
	}
	for k, v := range f.Extra {
		m[k] = v
	}
	return m
}

// nixlFactorKeys returns the keys of the dict the release of rules r
// hashes in compute_nixl_compatibility_hash, sorted as Python's
// json.dumps(sort_keys=True) writes them.
func nixlFactorKeys(r vllm.Rules) []string {
	keys := []string{"attn_backend_name", "cache_dtype"}
	if r.NixlHashCrossLayersBlocks {
		keys = append(keys, "cross_layers_blocks")
	}
	keys = append(keys, "dtype", "head_size", "is_hma_enabled", "model", "nixl_connector_version",
		"num_hidden_layers", "num_kv_heads")
	if r.NixlHashSpeculativeConfig {
		keys = append(keys, "speculative_config")
	}
	if r.NixlHashTransferMode {
		keys = append(keys, "transfer_mode")
	}
	return append(keys, "vllm_version")
}

// Hash returns the compatibility hash of f, as [CompatibilityHash] of
// f.Map(). It fails only when SpeculativeConfig holds a value PythonJSON
// cannot render.
func (f *Factors) Hash() (string, error) { return CompatibilityHash(f.Map()) }

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
	errJSONDepth = errors.New("handshake: PythonJSON: nesting deeper than 100 levels")
	errJSONUTF8  = errors.New("handshake: PythonJSON: string is not valid UTF-8")
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
			return nil, errors.New("handshake: PythonJSON: []byte is not JSON serializable")
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
			return nil, errors.New("handshake: PythonJSON: map keys must be strings, got " + v.Type().Key().String())
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
	return nil, errors.New("handshake: PythonJSON: unsupported type " + v.Type().String())
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
