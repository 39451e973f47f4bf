package enginecore

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unsafe"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// DType is an array's element type. The zero value dtNone marks an
// absent array (a nil field on the wire).
type DType uint8

// The element types vLLM sends. Every one is little-endian on the wire.
const (
	dtNone DType = iota
	dtBool
	dtInt8
	dtUint8
	dtInt16
	dtUint16
	dtInt32
	dtUint32
	dtInt64
	dtUint64
	dtFloat16
	dtBFloat16
	dtFloat32
	dtFloat64
	numDTypes
)

// maxDims is the most dimensions an array may have. vLLM's arrays have at
// most three.
const maxDims = 8

// maxEmptyExtent bounds the product of the non-zero dimensions of an array
// with no elements (such as shape [0, 6]), so that walking its shape is
// cheap.
const maxEmptyExtent = 1 << 16

var dtypeInfo = [numDTypes]struct {
	numpy, torch string
	size         int
}{
	dtNone:     {"", "", 0},
	dtBool:     {"|b1", "bool", 1},
	dtInt8:     {"|i1", "int8", 1},
	dtUint8:    {"|u1", "uint8", 1},
	dtInt16:    {"<i2", "int16", 2},
	dtUint16:   {"<u2", "uint16", 2},
	dtInt32:    {"<i4", "int32", 4},
	dtUint32:   {"<u4", "uint32", 4},
	dtInt64:    {"<i8", "int64", 8},
	dtUint64:   {"<u8", "uint64", 8},
	dtFloat16:  {"<f2", "float16", 2},
	dtBFloat16: {"", "bfloat16", 2}, // numpy has no bfloat16
	dtFloat32:  {"<f4", "float32", 4},
	dtFloat64:  {"<f8", "float64", 8},
}

// Size returns the size of one element in bytes (0 for dtNone).
func (d DType) size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns the torch-style name ("int32", "bfloat16"...), or "none".
func (d DType) String() string {
	if d == dtNone || d >= numDTypes {
		return "none"
	}
	return dtypeInfo[d].torch
}

// Numpy returns numpy's dtype.str for d ("<i4"...), or "" when numpy has
// no such type (bfloat16).
func (d DType) numpy() string {
	if d >= numDTypes {
		return ""
	}
	return dtypeInfo[d].numpy
}

// IsFloat reports whether d is a floating-point type.
func (d DType) isFloat() bool { return d >= dtFloat16 && d <= dtFloat64 }

// parseDType maps a wire dtype name (numpy's dtype.str or a torch dtype
// name) to a DType; torch reports which spelling it was.
func parseDType(s []byte) (d DType, torch bool, ok bool) {
	switch string(s) {
	case "<i4":
		return dtInt32, false, true
	case "<f4":
		return dtFloat32, false, true
	case "<i8":
		return dtInt64, false, true
	case "float32":
		return dtFloat32, true, true
	case "int64":
		return dtInt64, true, true
	case "bfloat16":
		return dtBFloat16, true, true
	case "int32":
		return dtInt32, true, true
	case "<f2":
		return dtFloat16, false, true
	case "<f8":
		return dtFloat64, false, true
	case "<i2":
		return dtInt16, false, true
	case "<u2":
		return dtUint16, false, true
	case "<u4":
		return dtUint32, false, true
	case "<u8":
		return dtUint64, false, true
	case "|b1", "<b1":
		return dtBool, false, true
	case "|i1", "<i1":
		return dtInt8, false, true
	case "|u1", "<u1":
		return dtUint8, false, true
	case "bool":
		return dtBool, true, true
	case "int8":
		return dtInt8, true, true
	case "uint8":
		return dtUint8, true, true
	case "int16":
		return dtInt16, true, true
	case "uint16":
		return dtUint16, true, true
	case "uint32":
		return dtUint32, true, true
	case "uint64":
		return dtUint64, true, true
	case "float16":
		return dtFloat16, true, true
	case "float64":
		return dtFloat64, true, true
	}
	// numpy spells one-byte types with "|" (dtype.str never uses "=");
	// anything else, big-endian ">" included, is refused.
	return dtNone, false, false
}

// Array is one numpy array or torch tensor from the wire: vLLM encodes it
// as [dtype, shape, data]. DType is dtNone for an absent (nil) array.
//
// Data holds the raw little-endian elements, row-major, and after
// [Decode] points into the frame it came from (inline in frame 0 or a
// whole aux frame); Frame says which (0 for inline). Shape's backing array
// is reused by later decodes into the same value.
//
// Data need not be aligned: [Array.Int] and [Array.Float] read any element
// of any dtype.
type Array struct {
	DType DType
	// Torch reports that the dtype was spelled the torch way ("float32")
	// rather than numpy's ("<f4"); the encoder keeps the spelling. bfloat16
	// is always torch.
	Torch bool
	Shape []int
	Data  []byte
	// Frame is the aux frame index the data came from, or 0 when it was
	// inline (ext type 3). Encoders ignore it.
	Frame int
}

// IsNil reports whether the array is absent.
func (a *Array) IsNil() bool { return a.DType == dtNone }

// Len returns the number of elements (the product of Shape; 1 for a
// scalar, shape []).
func (a *Array) Len() int {
	if a.DType == dtNone || a.DType.size() == 0 {
		return 0
	}
	return len(a.Data) / a.DType.size()
}

// Int returns element i (row-major) as an int64: integers and bool as is,
// floats truncated toward zero. It panics if i is out of range, like a
// slice index.
func (a *Array) Int(i int) int64 {
	switch a.DType {
	case dtBool, dtUint8:
		return int64(a.Data[i])
	case dtInt8:
		return int64(int8(a.Data[i]))
	case dtInt16:
		return int64(int16(binary.LittleEndian.Uint16(a.Data[2*i:])))
	case dtUint16:
		return int64(binary.LittleEndian.Uint16(a.Data[2*i:]))
	case dtInt32:
		return int64(int32(binary.LittleEndian.Uint32(a.Data[4*i:])))
	case dtUint32:
		return int64(binary.LittleEndian.Uint32(a.Data[4*i:]))
	case dtInt64, dtUint64:
		return int64(binary.LittleEndian.Uint64(a.Data[8*i:]))
	}
	return int64(a.Float(i))
}

// Float returns element i (row-major) as a float64. bfloat16 and float16
// are widened exactly. It panics if i is out of range.
func (a *Array) Float(i int) float64 {
	switch a.DType {
	case dtFloat16:
		return half(binary.LittleEndian.Uint16(a.Data[2*i:]))
	case dtBFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(a.Data[2*i:])) << 16))
	case dtFloat32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:])))
	case dtFloat64:
		return math.Float64frombits(binary.LittleEndian.Uint64(a.Data[8*i:]))
	case dtUint64:
		return float64(binary.LittleEndian.Uint64(a.Data[8*i:]))
	case dtNone:
		panic("enginecore: Float on a nil array")
	}
	return float64(a.Int(i))
}

// appendInts appends every element as an int64 (see [Array.Int]) to dst.
func (a *Array) appendInts(dst []int64) []int64 {
	for i, n := 0, a.Len(); i < n; i++ {
		dst = append(dst, a.Int(i))
	}
	return dst
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// view reinterprets a.Data as elements of size sz when the dtype matches,
// the data is aligned to sz and the machine is little-endian.
func (a *Array) view(d DType, sz uintptr) (unsafe.Pointer, int, bool) {
	if a.DType != d || !littleEndian {
		return nil, 0, false
	}
	if len(a.Data) == 0 {
		return nil, 0, true
	}
	p := unsafe.Pointer(unsafe.SliceData(a.Data))
	if uintptr(p)%sz != 0 {
		return nil, 0, false
	}
	return p, len(a.Data) / int(sz), true
}

// int32s returns Data as a []int32 sharing its memory, when DType is dtInt32,
// Data is 4-byte aligned and the machine is little-endian; ok is false
// otherwise (use [Array.Int]). Do not modify the result.
func (a *Array) int32s() (v []int32, ok bool) {
	p, n, ok := a.view(dtInt32, 4)
	if !ok || p == nil {
		return nil, ok
	}
	return unsafe.Slice((*int32)(p), n), true
}

// float32s is int32s for dtFloat32 data (4-byte aligned).
func (a *Array) float32s() (v []float32, ok bool) {
	p, n, ok := a.view(dtFloat32, 4)
	if !ok || p == nil {
		return nil, ok
	}
	return unsafe.Slice((*float32)(p), n), true
}

// half widens an IEEE 754 binary16 value.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// checkShape verifies that shape × item size equals n bytes without
// overflow.
func checkShape(shape []int, size, n int) *decodeguard.Error {
	total := size
	for _, d := range shape {
		if d < 0 {
			return decodeguard.NewError(decodeguard.ReasonDecode, "array shape has a negative dimension "+strconv.Itoa(d))
		}
		hi, lo := bits.Mul64(uint64(total), uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return decodeguard.NewError(decodeguard.ReasonOversize, "array shape overflows: its element count times the item size exceeds the address space")
		}
		total = int(lo)
	}
	if total == 0 {
		// An empty array: its other dimensions describe nothing, but a
		// consumer walking the shape would loop over them.
		prod := 1
		for _, d := range shape {
			if d == 0 {
				continue
			}
			if d > maxEmptyExtent/prod {
				return decodeguard.NewError(decodeguard.ReasonOversize, "empty array with a shape over maxEmptyExtent")
			}
			prod *= d
		}
	}
	if total != n {
		return decodeguard.NewError(decodeguard.ReasonDecode,
			"array data is "+strconv.Itoa(n)+" bytes but its shape and dtype need "+strconv.Itoa(total))
	}
	return nil
}

// DTypeOf returns the DType a wire dtype names: numpy's dtype.str ("<i4",
// "|b1"...) or torch's dtype name ("int32", "bfloat16"...). It returns the
// zero DType, an absent array's, for a name vLLM does not send. The name
// [DType.String] returns maps back to the same DType.
func DTypeOf(name string) DType {
	d, _, ok := parseDType([]byte(name))
	if !ok {
		return dtNone
	}
	return d
}

// array decodes one array or tensor (or nil) at the front of b into a.
func (d *decoder) array(orig, b []byte, a *Array, what string) ([]byte, error) {
	if p, ok := d.arrayFast(b, a); ok {
		return b[p:], nil
	}
	if msgp.IsNil(b) {
		if a.DType != dtNone {
			*a = Array{Shape: a.Shape[:0]}
		}
		return b[1:], nil
	}
	at := b
	var n uint32
	var err error
	if len(b) > 0 && b[0] == 0x93 { // fixarray of 3, inline
		n, b = 3, b[1:]
	} else {
		n, b, err = readArrayHeader(b)
	}
	if err != nil || n != 3 {
		return b, fail(orig, at, what+": want nil or [dtype, shape, data]", err)
	}
	dsAt := b
	var ds []byte
	if len(b) > 0 && b[0]&0xe0 == 0xa0 && len(b) > int(b[0]&0x1f) { // fixstr, inline
		k := 1 + int(b[0]&0x1f)
		ds, b = b[1:k], b[k:]
	} else if ds, b, err = readStr(b); err != nil {
		return b, fail(orig, dsAt, what+".dtype: want a str", err)
	}
	dt, torch, ok := parseDType(ds)
	if !ok {
		return b, failf(orig, dsAt, decodeguard.ReasonDecode, what+": unknown dtype "+strconv.Quote(ratelog.Escape(string(ds), 32)))
	}
	shAt := b
	var k uint32
	if len(b) > 0 && b[0]&0xf0 == 0x90 { // fixarray, inline
		k, b = uint32(b[0]&0x0f), b[1:]
	} else {
		k, b, err = readArrayHeader(b)
	}
	if err != nil {
		return b, fail(orig, shAt, what+".shape: want an array of int", err)
	}
	if k > maxDims {
		return b, failf(orig, shAt, decodeguard.ReasonOversize, what+".shape: "+strconv.Itoa(int(k))+" dimensions, over the limit of "+strconv.Itoa(maxDims))
	}
	if d.budget -= 4 + int(k); d.budget < 0 { // the array, its three parts, the dims
		return b, failf(orig, at, decodeguard.ReasonOversize, errBudget)
	}
	shape := a.Shape[:0]
	for j := uint32(0); j < k; j++ {
		var v int64
		if len(b) > 0 && b[0] <= 0x7f { // positive fixint, inline
			v, b = int64(b[0]), b[1:]
		} else if v, b, err = readInt(b); err != nil {
			return b, fail(orig, shAt, what+".shape: want an array of int", err)
		}
		if int64(int(v)) != v {
			return b, failf(orig, shAt, decodeguard.ReasonOversize, what+".shape: dimension out of range")
		}
		shape = append(shape, int(v))
	}
	dataAt := b
	if len(b) == 0 {
		return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: missing")
	}
	var data []byte
	frame := 0
	switch c := b[0]; {
	case c <= 0x7f || c == 0xcc || c == 0xcd || c == 0xce || c == 0xcf || c >= 0xe0 ||
		c == 0xd0 || c == 0xd1 || c == 0xd2 || c == 0xd3: // an int: an aux frame index
		var idx int64
		if c <= 0x7f { // positive fixint, inline
			idx, b = int64(c), b[1:]
		} else {
			idx, b, err = readInt(b)
		}
		if err != nil || idx < 1 || idx >= int64(len(d.frames)) {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode,
				what+".data: aux frame index out of range [1, "+strconv.Itoa(len(d.frames))+")")
		}
		i := int(idx)
		if d.m.used[i/64]&(1<<(i%64)) != 0 {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, errAuxTwiceAt+strconv.Itoa(i))
		}
		d.m.used[i/64] |= 1 << (i % 64)
		data, frame = d.frames[i], i
	case (c >= 0xd4 && c <= 0xd8) || (c >= 0xc7 && c <= 0xc9): // ext
		typ, payload, rest, ok := readExt(b)
		if !ok {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: malformed ext")
		}
		if typ != extRawView {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: ext type "+strconv.Itoa(int(typ))+", want 3 (raw bytes)")
		}
		data, b = payload, rest
	case c == 0xc4 || c == 0xc5 || c == 0xc6: // bin, as older releases sent
		data, b, err = msgp.ReadBytesZC(b)
		if err != nil {
			return b, fail(orig, dataAt, what+".data: malformed bin", err)
		}
	default:
		return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: want ext 3 or an aux frame index")
	}
	if e := checkShape(shape, dt.size(), len(data)); e != nil {
		e.Detail = what + ": " + e.Detail
		e.Offset = len(orig) - len(at)
		return b, e
	}
	a.DType, a.Torch, a.Shape, a.Data, a.Frame = dt, torch, shape, data, frame
	return b, nil
}
