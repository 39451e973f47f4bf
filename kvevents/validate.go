package kvevents

// validate applies the rules vLLM's own publishers guarantee (see the
// package documentation and docs/kv-events.md for their sources).
func validate(ev *Event, seen uint16) error {
	switch ev.Type {
	case BlockStored:
		const required = 1<<fBlockHashes | 1<<fTokenIDs | 1<<fBlockSize
		if seen&required != required {
			return decodeErr("kvevents: BlockStored without block_hashes, token_ids or block_size")
		}
		nt, nh, bs := ev.tokens(), int64(len(ev.BlockHashes)), ev.BlockSize
		switch {
		case bs < 0:
			return validateErr("kvevents: BlockStored block_size %d (negative)", bs)
		case bs == 0 && nt != 0:
			// Only the offloading placeholder has block_size 0, and it
			// never carries tokens (vLLM PR #36644).
			return validateErr("kvevents: BlockStored block_size 0 with %d token_ids (a block_size 0 store carries none)", nt)
		case bs == 0 && nh == 0:
			return validateErr("kvevents: BlockStored placeholder (block_size 0) without a block hash")
		case nt != 0 && (nt%bs != 0 || nt/bs < nh):
			// Full blocks only; null blocks of hybrid models keep their
			// tokens but lose their hash (vLLM issue #44451).
			return validateErr("kvevents: BlockStored has %d token_ids for %d block_hashes of block_size %d (want 0, or a multiple of block_size of at least block_hashes × block_size)",
				nt, nh, bs)
		}
		if ev.HasExtraKeys && len(ev.ExtraKeys) != len(ev.BlockHashes) {
			return validateErr("kvevents: BlockStored has %d extra_keys for %d block_hashes",
				len(ev.ExtraKeys), len(ev.BlockHashes))
		}
	case BlockRemoved, blockInactive:
		if seen&(1<<fBlockHashes) == 0 {
			return decodeErr("kvevents: %s without block_hashes", ev.Type)
		}
	}
	return nil
}
