package decodeguard

// Limits configures the structural msgpack pre-scan every zmqguard decode
// runs before a decoder allocates anything a header claims (the loop
// package's MsgpDecoder and UntypedDecoder, the references' own decoders).
// The zero value means the defaults, field by field, and a nil *Limits
// means the same.
type Limits struct {
	// MaxDepth is the deepest nesting of arrays and maps accepted; a
	// top-level array or map is at depth 1. Empty containers count. Zero
	// (or negative) means 32; vLLM's deepest message nests four levels.
	// The scan keeps its stack of open containers in a fixed array of 32
	// entries; only a frame nested deeper than that, under a MaxDepth
	// raised above it, makes it allocate (8 bytes per level).
	MaxDepth int
	// MaxElements bounds the number of msgpack objects in a frame, counted
	// from the headers before any element is read: the top-level object plus
	// N per array of N elements plus 2N per map of N pairs. Zero (or
	// negative) means 262,144: a quarter of the default MaxBytes, which
	// keeps what an untyped decode builds from one frame to a few MiB.
	MaxElements int
	// MaxBytes is the longest frame accepted. Zero (or negative) means
	// 1 MiB, zmqguard's default maximum message size.
	MaxBytes int
	// CompositeKeys allows map keys that are themselves maps or arrays.
	// Off by default: Go (and Python) decoders cannot key on them, and no
	// vLLM message uses them.
	CompositeKeys bool
	// AllowExt lists the extension types accepted (each at most once
	// matters; order does not); any other ext is refused. The default is the empty set: none of the vLLM messages
	// zmqguard speaks uses an extension type (not even the timestamp, -1).
	// The payload of an allowed ext is not inspected.
	AllowExt []int8
}
