package handshake

import (
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
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
//   - since connector version 7 (vLLM PR #50620): transfer_mode;
//   - with the option ",pr55776" (vLLM PR #55776, open: connector version
//     8): revision and code_revision, the model's (see
//     [vllm.Rules].NixlHashModelRevision).
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
	// values are rendered as Python's json.dumps renders the equivalent
	// Python values (key speculative_config, hashed since connector
	// version 6).
	SpeculativeConfig map[string]any
	// TransferMode is "pull" (READ, the default when empty) or "push"
	// (WRITE) (key transfer_mode, hashed since connector version 7).
	TransferMode string
	// Revision is the primary model's resolved revision (a commit hash
	// of its repository), empty for None (key revision, hashed only by
	// builds carrying vLLM PR #55776: the profile option ",pr55776").
	Revision string
	// CodeRevision is the configured code_revision, empty for None (key
	// code_revision, hashed only with the option ",pr55776", as Revision).
	CodeRevision string
	// Extra holds further keys, added to (or replacing) the ones above,
	// for forks and builds whose factor set differs from their release's.
	Extra map[string]any
}

// dict returns a new map of the factors as the dict the release's vLLM
// hashes: exactly the keys of nixlFactorKeys(Release.Rules()), then
// Extra's keys.
func (f *Factors) dict() map[string]any {
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
	if rules.NixlHashModelRevision {
		// vLLM PR #55776: a rolling update that changes the weights but
		// not the geometry must fail the handshake.
		m["revision"] = noneIfEmpty(f.Revision)
		m["code_revision"] = noneIfEmpty(f.CodeRevision)
	}
	for k, v := range f.Extra {
		m[k] = v
	}
	return m
}

// noneIfEmpty is s, or nil (Python's None) when s is empty.
func noneIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nixlFactorKeys returns the keys of the dict the release of rules r
// hashes in compute_nixl_compatibility_hash, sorted as Python's
// json.dumps(sort_keys=True) writes them.
func nixlFactorKeys(r vllm.Rules) []string {
	keys := []string{"attn_backend_name", "cache_dtype"}
	if r.NixlHashModelRevision {
		keys = append(keys, "code_revision")
	}
	if r.NixlHashCrossLayersBlocks {
		keys = append(keys, "cross_layers_blocks")
	}
	keys = append(keys, "dtype", "head_size", "is_hma_enabled", "model", "nixl_connector_version",
		"num_hidden_layers", "num_kv_heads")
	if r.NixlHashModelRevision {
		keys = append(keys, "revision")
	}
	if r.NixlHashSpeculativeConfig {
		keys = append(keys, "speculative_config")
	}
	if r.NixlHashTransferMode {
		keys = append(keys, "transfer_mode")
	}
	return append(keys, "vllm_version")
}

// Hash returns vLLM's compatibility hash of f: the lower-case hex SHA-256
// of the UTF-8 bytes of Python's json.dumps(factors, sort_keys=True) over
// the dict f's release hashes (with Extra's keys added). It fails only when
// SpeculativeConfig or Extra holds a value Python's json.dumps would refuse
// or this package cannot render (bytes, a map with non-string keys, a
// channel, nesting deeper than 100 levels, invalid UTF-8).
func (f Factors) Hash() (string, error) { return nixlwire.CompatibilityHash(f.dict()) }
