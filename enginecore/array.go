package enginecore

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unsafe"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// DType is an array's element type. The zero value DTypeNone marks an
// absent array (a nil field on the wire).
type DType uint8

// The element types vLLM sends. Every one is little-endian on the wire.
const (
	DTypeNone DType = iota
	Bool
	Int8
	Uint8
	Int16
	Uint16
	Int32
	Uint32
	Int64
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	numDTypes
)

// MaxDims is the most dimensions an array may have. vLLM's arrays have at
// most three.
const MaxDims = 8

// MaxEmptyExtent bounds the product of the non-zero dimensions of an array
// with no elements (such as shape [0, 6]), so that walking its shape is
// cheap.
const MaxEmptyExtent = 1 << 16

var dtypeInfo = [numDTypes]struct {
	numpy, torch string
	size         int
}{
	DTypeNone: {"", "", 0},
	Bool:      {"|b1", "bool", 1},
	Int8:      {"|i1", "int8", 1},
	Uint8:     {"|u1", "uint8", 1},
	Int16:     {"<i2", "int16", 2},
	Uint16:    {"<u2", "uint16", 2},
	Int32:     {"<i4", "int32", 4},
	Uint32:    {"<u4", "uint32", 4},
	Int64:     {"<i8", "int64", 8},
	Uint64:    {"<u8", "uint64", 8},
	Float16:   {"<f2", "float16", 2},
	BFloat16:  {"", "bfloat16", 2}, // numpy has no bfloat16
	Float32:   {"<f4", "float32", 4},
	Float64:   {"<f8", "float64", 8},
}

// Size returns the size of one element in bytes (0 for DTypeNone).
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns the torch-style name ("int32", "bfloat16"...), or "none".
func (d DType) String() string {
	if d == DTypeNone || d >= numDTypes {
		return "none"
	}
	return dtypeInfo[d].torch
}

// Numpy returns numpy's dtype.str for d ("<i4"...), or "" when numpy has
// no such type (bfloat16).
func (d DType) Numpy() string {
	if d >= numDTypes {
		return ""
	}
	return dtypeInfo[d].numpy
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d >= Float16 && d <= Float64 }

// parseDType maps a wire dtype name (numpy's dtype.str or a torch dtype
// name) to a DType; torch reports which spelling it was.
func parseDType(s []byte) (d DType, torch bool, ok bool) {
	switch string(s) {
	case "<i4":
		return Int32, false, true
	case "<f4":
		return Float32, false, true
	case "<i8":
		return Int64, false, true
	case "float32":
		return Float32, true, true
	case "int64":
		return Int64, true, true
	case "bfloat16":
		return BFloat16, true, true
	case "int32":
		return Int32, true, true
	case "<f2":
		return Float16, false, true
	case "<f8":
		return Float64, false, true
	case "<i2":
		return Int16, false, true
	case "<u2":
		return Uint16, false, true
	case "<u4":
		return Uint32, false, true
	case "<u8":
		return Uint64, false, true
	case "|b1", "<b1":
		return Bool, false, true
	case "|i1", "<i1":
		return Int8, false, true
	case "|u1", "<u1":
		return Uint8, false, true
	case "bool":
		return Bool, true, true
	case "int8":
		return Int8, true, true
	case "uint8":
		return Uint8, true, true
	case "int16":
		return Int16, true, true
	case "uint16":
		return Uint16, true, true
	case "uint32":
		return Uint32, true, true
	case "uint64":
		return Uint64, true, true
	case "float16":
		return Float16, true, true
	case "float64":
		return Float64, true, true
	}
	// numpy spells one-byte types with "|" (dtype.str never uses "=");
	// anything else, big-endian ">" included, is refused.
	return DTypeNone, false, false
}

// Array is one numpy array or torch tensor from the wire: vLLM encodes it
// as [dtype, shape, data]. DType is DTypeNone for an absent (nil) array.
//
// Data holds the raw little-endian elements, row-major, and after
// [Decode] points into the frame it came from (inline in frame 0 or a
// whole aux frame); Frame says which (0 for inline). Shape's backing array
// is reused by later decodes into the same value.
//
// Data need not be aligned: use the accessors for typed reads, or the
// Int32s/Int64s/Float32s views, which succeed only on aligned data on a
// little-endian machine.
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
func (a *Array) IsNil() bool { return a.DType == DTypeNone }

// Len returns the number of elements (the product of Shape; 1 for a
// scalar, shape []).
func (a *Array) Len() int {
	if a.DType == DTypeNone || a.DType.Size() == 0 {
		return 0
	}
	return len(a.Data) / a.DType.Size()
}

// Int returns element i (row-major) as an int64: integers and bool as is,
// floats truncated toward zero. It panics if i is out of range, like a
// slice index.
func (a *Array) Int(i int) int64 {
	switch a.DType {
	case Bool, Uint8:
		return int64(a.Data[i])
	case Int8:
		return int64(int8(a.Data[i]))
	case Int16:
		return int64(int16(binary.LittleEndian.Uint16(a.Data[2*i:])))
	case Uint16:
		return int64(binary.LittleEndian.Uint16(a.Data[2*i:]))
	case Int32:
		return int64(int32(binary.LittleEndian.Uint32(a.Data[4*i:])))
	case Uint32:
		return int64(binary.LittleEndian.Uint32(a.Data[4*i:]))
	case Int64, Uint64:
		return int64(binary.LittleEndian.Uint64(a.Data[8*i:]))
	}
	return int64(a.Float(i))
}

// Float returns element i (row-major) as a float64. bfloat16 and float16
// are widened exactly. It panics if i is out of range.
func (a *Array) Float(i int) float64 {
	switch a.DType {
	case Float16:
		return half(binary.LittleEndian.Uint16(a.Data[2*i:]))
	case BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(a.Data[2*i:])) << 16))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:])))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(a.Data[8*i:]))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(a.Data[8*i:]))
	case DTypeNone:
		panic("enginecore: Float on a nil array")
	}
	return float64(a.Int(i))
}

// AppendInts appends every element as an int64 (see [Array.Int]) to dst.
func (a *Array) AppendInts(dst []int64) []int64 {
	for i, n := 0, a.Len(); i < n; i++ {
		dst = append(dst, a.Int(i))
	}
	return dst
}

// AppendFloats appends every element as a float64 (see [Array.Float]) to dst.
func (a *Array) AppendFloats(dst []float64) []float64 {
	for i, n := 0, a.Len(); i < n; i++ {
		dst = append(dst, a.Float(i))
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

// Int32s returns Data as a []int32 sharing its memory, when DType is Int32,
// Data is 4-byte aligned and the machine is little-endian; ok is false
// otherwise (use [Array.Int]). Do not modify the result.
func (a *Array) Int32s() (v []int32, ok bool) {
	p, n, ok := a.view(Int32, 4)
	if !ok || p == nil {
		return nil, ok
	}
	return unsafe.Slice((*int32)(p), n), true
}

// Int64s is [Array.Int32s] for Int64 data (8-byte aligned).
func (a *Array) Int64s() (v []int64, ok bool) {
	p, n, ok := a.view(Int64, 8)
	if !ok || p == nil {
		return nil, ok
	}
	return unsafe.Slice((*int64)(p), n), true
}

// Float32s is [Array.Int32s] for Float32 data (4-byte aligned).
func (a *Array) Float32s() (v []float32, ok bool) {
	p, n, ok := a.view(Float32, 4)
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
			if d > MaxEmptyExtent/prod {
				return decodeguard.NewError(decodeguard.ReasonOversize, "empty array with a shape over MaxEmptyExtent")
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
