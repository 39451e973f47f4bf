package kvevents

// Position is where a source's delivery stands: the last batch delivered to
// the Handler and a digest of its payload. A consumer that keeps what it
// applied (an index's snapshot, a shared store) keeps the Position with it
// and gives it back in Source.Resume, so that a new Subscriber proves the
// publisher is still the run it followed before delivering anything newer.
//
// The digest covers the payload bytes as received; vLLM's payload starts
// with the batch's timestamp, so two runs' batches at one sequence number
// differ in it.
type Position struct {
	// Seq is the sequence number of the last batch delivered.
	Seq uint64
	// Digest is the digest of that batch's payload (Batch.Digest).
	Digest uint64
}
