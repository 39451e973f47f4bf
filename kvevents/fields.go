package kvevents

// The event fields vLLM declares, shared by the decoders and the encoder.

// field names, in vLLM's declaration order.
const (
	fBlockHashes = iota
	fParent
	fTokenIDs
	fBlockSize
	fLoraID
	fMedium
	fLoraName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fSpecWindow
	fLocality
	fOwnership
	fSessionID
	fUnknown
)

func fieldOf(key []byte) int {
	switch string(key) {
	case "block_hashes":
		return fBlockHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokenIDs
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoraID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoraName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroupIdx
	case "kv_cache_spec_kind":
		return fSpecKind
	case "kv_cache_spec_sliding_window":
		return fSpecWindow
	case "locality":
		return fLocality
	case "ownership":
		return fOwnership
	case "session_id":
		return fSessionID
	}
	return fUnknown
}

// Fields in vLLM's declaration order: storedFields and removedFields are
// what the map form may carry (vllm/distributed/kv_events.py, with ownership
// and session_id of later main). storedArray and removedArray are the fields
// the last array-form release declared (before vLLM PR #42892): msgspec
// writes an array_like struct with every one of them, defaults included, and
// they are the positions after the tag that the array form is read with
// (vLLM v0.9–v0.25, array_like=True). Fields added after the map form came
// (locality, ownership, session_id) never had an array position: an element
// past these is one this release does not know, read past and counted.
var (
	storedFields  = []int{fBlockHashes, fParent, fTokenIDs, fBlockSize, fLoraID, fMedium, fLoraName, fExtraKeys, fGroupIdx, fSpecKind, fSpecWindow, fLocality, fOwnership, fSessionID}
	removedFields = []int{fBlockHashes, fMedium, fGroupIdx, fLocality, fOwnership}
	storedArray   = storedFields[:fLocality]
	removedArray  = removedFields[:3]
	// inactiveFields are blockInactive's (vLLM PR #50732, open): a map-form
	// event like BlockRemoved's, block_hashes and medium (MEDIUM_GPU); the
	// array positions follow BlockRemoved's should an array form appear.
	inactiveFields = removedFields[:3]
	// sglangStored and sglangRemoved are the fields of SGLang's array_like
	// events, every one always written (SGLang's disaggregation/kv_events.py:
	// array_like and tag since SGLang PR #6098, medium since #18205):
	// BlockStored [tag, block_hashes, parent_block_hash, token_ids,
	// block_size, lora_id, medium], BlockRemoved [tag, block_hashes, medium],
	// AllBlocksCleared [tag]. They are vLLM's array-form fields cut short, so
	// one array reader decodes both engines.
	sglangStored  = storedFields[:fLoraName]
	sglangRemoved = removedFields[:2]
)

// arrayFields returns the fields the array form of an event type is read
// with, by position after the tag: vLLM's, or SGLang's for a source whose
// Engine is "sglang".
func arrayFields(typ string, sglang bool) []int {
	if sglang {
		return sglangFields(typ)
	}
	switch typ {
	case BlockStored:
		return storedArray
	case BlockRemoved:
		return removedArray
	case blockInactive:
		return inactiveFields
	}
	return nil
}

func fieldName(f int) string {
	return [...]string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
		"lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
		"locality", "ownership", "session_id", "unknown"}[f]
}
