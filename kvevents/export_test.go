package kvevents

// isBytes reports whether h is in the bin form.
func (h Hash) isBytes() bool { return h.n != 0 }

// placeholder reports an offloading placeholder: a BlockStored without
// token_ids (see Event's doc).
func (e *Event) placeholder() bool { return e.Type == BlockStored && len(e.TokenIDs) == 0 }
