package kvevents

import (
	"errors"
	"fmt"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// Decode limits. vLLM publishes one batch per scheduler step with every
// event of that step (vllm/v1/core/sched/scheduler.py), so a batch grows
// with the step: one store per scheduled request and KV-cache group, one
// removal per evicted block, the connector's offloading events. In the
// "full" report mode (vLLM PR #45261) each request that hits the prefix
// cache also re-announces its whole cached prefix in one store: a step
// admitting many requests that share a long prompt carries that prompt's
// tokens once per request (64 requests × 32k tokens is about 10 MiB of
// token ids, at up to 5 bytes each).
const (
	// defaultMaxPayload is the default cap on one batch payload, checked
	// before anything is decoded: 64 MiB, about 13 million token ids, such
	// as a "full" report-mode step admitting 100 requests with 128k-token
	// cached prefixes. It also sizes the live socket's message limit.
	defaultMaxPayload = 64 << 20
	// defaultMaxEvents is the default cap on the events of one batch:
	// 65,536, above what a step of vLLM's server defaults can produce (up
	// to 1,024 scheduled requests, 8,192 batched tokens, so at most a few
	// thousand stores and evictions per KV-cache group).
	defaultMaxEvents = 1 << 16
)

// limits bounds what decodeBatch accepts (Config.MaxPayload,
// Config.MaxEvents). Zero fields take the defaults.
type limits struct {
	MaxPayload int
	MaxEvents  int
	// Inactive decodes blockInactive events (Config.DecodeBlockInactive)
	// instead of counting them as unsupported.
	Inactive bool
	// SGLang reads array-form events with SGLang's fields (Source.Engine
	// "sglang"): an element after them is read past, not read as vLLM's
	// field at that position.
	SGLang bool
}

func (l limits) withDefaults() limits {
	if l.MaxPayload <= 0 {
		l.MaxPayload = defaultMaxPayload
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = defaultMaxEvents
	}
	return l
}

// eventDrop describes one event DecodeBatch left out of a batch.
type eventDrop struct {
	// Index is the event's position in the batch.
	Index int
	// Err is the classified error: ReasonDecode, ReasonValidate, or
	// ReasonUnsupported for a well-formed event of a type this release does
	// not know.
	Err error
	// Type is, for ReasonUnsupported, the event's type tag as sent (raw
	// peer text: quote it, with strconv.Quote or %q, before printing).
	Type string
}

// DecodeBatch decodes one KVEventBatch payload into b, reusing b's slices.
// It accepts both event forms (tagged maps since vLLM PR #42892, v0.26.0, and
// the tagged arrays of v0.9–v0.25), SGLang's event arrays (a prefix of the
// latter: see Source.Engine for what differs), and every hash form (vLLM's
// unsigned integers and bin digests, SGLang's signed integers), in any mix.
// Fields a later release adds are read past and counted in b.UnknownFields.
//
// The limits are the Subscriber's defaults: 64 MiB and 65,536 events.
// An error is returned, classified for decodeguard, when the payload as a
// whole is unusable: over 64 MiB (ReasonOversize), not well-formed
// msgpack, not a batch array or map, a ts that is not a number, events that
// are not an array, a data_parallel_rank that is neither an integer nor nil
// (ReasonDecode), or more than 65,536 events (ReasonOversize). A bad event
// costs only that event: it is left out of b.Events and b.DroppedEvents
// counts it.
//
// b.Events' slices and ExtraKeys alias p; strings are copied (the usual
// media names are interned, so they cost nothing).
func DecodeBatch(p []byte, b *Batch) error { return decodeBatch(p, limits{}, b, nil) }

// decodeBatch is DecodeBatch with limits and a callback: onDrop (if
// non-nil) is called with each dropped event's index and classified error.
//
// One pass decodes the payload, checking each header against the bytes
// present before it reads or allocates what the header describes (see
// decode_read.go), and holds it to msgpscan's structural rules (depth 32, no
// ext types, UTF-8 strings, scalar map keys, no trailing bytes) as it goes.
// A refusal keeps the reason and text the checked decoder (the structural
// pre-scan, then the decode) gave: a payload that breaks a structural rule
// anywhere is refused with msgpscan's error, whatever else is wrong with it
// (the scan runs only then, to name the break); any other with the first
// batch-level error in the batch's order. Event drops are
// reported only for a payload that is well-formed as a whole.
// FuzzDecodeMatchesOracle holds this to the checked two-pass decoder.
func decodeBatch(p []byte, lim limits, b *Batch, onDrop func(eventDrop)) error {
	lim = lim.withDefaults()
	b.reuse()
	if len(p) > lim.MaxPayload {
		return decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: payload of %d bytes over the %d-byte limit", len(p), lim.MaxPayload))
	}
	err := b.decode(p, lim)
	if err != nil {
		// Cold: a structural error anywhere comes first.
		scanLim := decodeguard.Limits{MaxBytes: lim.MaxPayload, MaxElements: lim.MaxPayload}
		if _, serr := msgpscan.ScanOffset(p, &scanLim); serr != nil {
			b.dropAll()
			return serr
		}
		if err == errMalformed {
			// The pass found a break the scan does not: a bug, refused
			// rather than decoded.
			b.dropAll()
			return decodeErr("kvevents: batch not decoded")
		}
	}
	if onDrop != nil {
		for i := range b.drops {
			onDrop(b.drops[i])
		}
	}
	clear(b.drops)
	b.drops = b.drops[:0]
	return err
}

// errMalformed reports, inside the decoder, a payload that breaks a
// structural rule; decodeBatch replaces it with msgpscan's error.
var errMalformed = errors.New("kvevents: malformed")

// dropAll forgets a refused batch's events and drops.
func (b *Batch) dropAll() {
	b.Events, b.Index = b.Events[:0], b.Index[:0]
	clear(b.drops)
	b.drops = b.drops[:0]
}

// decode decodes p into b. It returns errMalformed for a structural break,
// or the first batch-level error; b.drops holds the event drops to report
// with it (only a data_parallel_rank error of the array form follows
// events).
func (b *Batch) decode(p []byte, lim limits) error {
	if len(p) == 0 {
		return errMalformed
	}
	if isMap(p[0]) {
		err := b.decodeMap(p, lim)
		if err != nil {
			b.dropAll()
		}
		return err
	}
	n, j, ok := arrayAt(p, 0)
	if !ok {
		if isArray(p[0]) {
			return errMalformed
		}
		return decodeErr("kvevents: batch is a %s, not an array", msgp.NextType(p))
	}
	if n < 2 {
		return decodeErr("kvevents: batch array of %d elements, want 2 or 3", n)
	}
	var err error
	if b.TS, j, err = numberAt(p, j); err != nil {
		return batchErr("kvevents: batch ts: %v", err)
	}
	if j, err = b.events(p, j, lim); err != nil {
		return err
	}
	if n >= 3 {
		if b.DataParallelRank, j, err = optIntAt(p, j); err != nil {
			return batchErr("kvevents: data_parallel_rank: %v", err)
		}
	}
	for k := 3; k < n; k++ {
		var ok bool
		if j, ok = skipAt(p, j, depthBatchField); !ok {
			return errMalformed
		}
		b.UnknownFields++
	}
	if j != len(p) {
		return errMalformed
	}
	return nil
}

// batchErr wraps a value error as a decode error (errMalformed as is).
func batchErr(format string, err error) error {
	if err == errMalformed {
		return err
	}
	return decodeErr(format, err)
}

// decodeMap decodes the map form of a batch, {"ts", "events",
// "data_parallel_rank"} (a msgspec EventBatch without array_like). As
// msgspec reads it, a repeated key counts its last value, and a batch
// field's error comes before any event's: the events are decoded where they
// stand and forgotten if a later "events" replaces them.
func (b *Batch) decodeMap(p []byte, lim limits) error {
	n, j, ok := mapAt(p, 0)
	if !ok {
		return errMalformed
	}
	haveTS, haveEvents := false, false
	var eventsErr error // the last events value's error, reported last
	unknown := 0        // unknown batch keys
	for k := 0; k < n; k++ {
		at := j
		key, j2, err := keyAt(p, j)
		if err != nil {
			return batchErr("kvevents: batch map key: %v", err)
		}
		j = j2
		switch string(key) {
		case "ts":
			if b.TS, j, err = numberAt(p, j); err != nil {
				return batchKeyErr(key, err)
			}
			haveTS = true
		case "events":
			if haveEvents {
				// A later events replaces the earlier one.
				b.Events, b.Index, b.DroppedEvents, b.UnknownFields = b.Events[:0], b.Index[:0], 0, 0
				clear(b.drops)
				b.drops = b.drops[:0]
			}
			haveEvents = true
			start := j
			if j, eventsErr = b.events(p, j, lim); eventsErr != nil {
				if eventsErr == errMalformed {
					return eventsErr
				}
				if j, ok = skipAt(p, start, depthBatchField); !ok {
					return errMalformed
				}
			}
		case "data_parallel_rank":
			if b.DataParallelRank, j, err = optIntAt(p, j); err != nil {
				return batchKeyErr(key, err)
			}
		default:
			if !checkKey(p, at, key) {
				return errMalformed
			}
			if j, ok = skipAt(p, j, depthBatchField); !ok {
				return errMalformed
			}
			unknown++
		}
	}
	if j != len(p) {
		return errMalformed
	}
	if !haveTS || !haveEvents {
		return decodeErr("kvevents: batch map without ts or events")
	}
	if eventsErr != nil {
		return eventsErr
	}
	b.UnknownFields += unknown
	return nil
}

func batchKeyErr(key []byte, err error) error {
	if err == errMalformed {
		return err
	}
	return decodeErr("kvevents: batch field %s: %v", ratelog.Escape(string(key), 64), err)
}

// events decodes the events array at p[i:] into b, collecting the drops in
// b.drops.
func (b *Batch) events(p []byte, i int, lim limits) (int, error) {
	n, j, ok := arrayAt(p, i)
	if !ok {
		if i < len(p) && isArray(p[i]) {
			return i, errMalformed
		}
		return i, decodeErr("kvevents: events is a %s, not an array", typeAt(p, i))
	}
	if n > lim.MaxEvents {
		return i, decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: batch of %d events over the %d-event limit", n, lim.MaxEvents))
	}
	for k := 0; k < n; k++ {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:len(b.Events)+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		ev := &b.Events[len(b.Events)-1]
		ev.reset()
		start := j
		var (
			seen uint16
			err  error
			tag  []byte
		)
		if j, seen, tag, err = b.event(p, j, ev, lim); err == nil {
			err = validate(ev, seen)
		} else {
			// Cold: the event must be well-formed for its error to count.
			if j, ok = skipAt(p, start, depthEvent); !ok || err == errMalformed {
				return i, errMalformed
			}
		}
		if err == nil {
			b.Index = append(b.Index, k)
			b.UnknownFields += ev.unknown
			continue
		}
		b.Events = b.Events[:len(b.Events)-1]
		b.DroppedEvents++
		b.drops = append(b.drops, eventDrop{Index: k, Err: err, Type: string(tag)})
	}
	return j, nil
}

// reuse empties b for a new batch, keeping its slices (up to retainElems).
func (b *Batch) reuse() {
	b.TS, b.DataParallelRank, b.DroppedEvents, b.UnknownFields = 0, Opt[int64]{}, 0, 0
	if cap(b.Events) > retainElems {
		b.Events, b.Index = nil, nil
	}
	b.Events, b.Index = b.Events[:0], b.Index[:0]
	clear(b.drops)
	b.drops = b.drops[:0]
}

func decodeErr(format string, args ...any) error {
	return decodeguard.NewError(decodeguard.ReasonDecode, fmt.Sprintf(format, args...))
}

func validateErr(format string, args ...any) error {
	return decodeguard.NewError(decodeguard.ReasonValidate, fmt.Sprintf(format, args...))
}
