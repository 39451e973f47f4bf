package msgpscan

import (
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// FuzzScanPrefix is ScanPrefix's differential check against Scan: on any
// input and limits (picked by the first byte), ScanPrefix accepts with n ==
// len(b) exactly when Scan accepts (MaxBytes aside); when it accepts with n
// < len(b), Scan refuses with trailing bytes at n and Scan accepts b[:n];
// and the object count it returns is the smallest MaxElements under which
// Scan accepts b[:n].
func FuzzScanPrefix(f *testing.F) {
	addSeeds(f)
	f.Add([]byte{0x92, 0x01, 0x02, 0x03})
	f.Add([]byte{0x81, 0xa1, 'k', 0x91, 0xc0, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := &decodeguard.Limits{MaxDepth: 1 + len(b)%5, CompositeKeys: len(b)%3 == 0}
		if len(b)%2 == 0 {
			lim.AllowExt = AllExtTypes()
		}
		n, objs, err := ScanPrefix(b, lim)
		whole := Scan(b, lim)
		if err != nil {
			if !decodeguard.IsBadInput(err) || n < 0 || n > len(b) {
				t.Fatalf("ScanPrefix (%d, %v)", n, err)
			}
			if whole == nil {
				t.Fatalf("ScanPrefix refuses (%v), Scan accepts", err)
			}
			return
		}
		if n <= 0 || n > len(b) || objs < 1 || objs > n {
			t.Fatalf("ScanPrefix accepts with n %d, %d objects, of %d bytes", n, objs, len(b))
		}
		if (n == len(b)) != (whole == nil) {
			t.Fatalf("ScanPrefix length %d of %d; Scan %v", n, len(b), whole)
		}
		if n < len(b) && (whole.(*decodeguard.Error).Detail != errTrailing.Detail || whole.(*decodeguard.Error).Offset != n) {
			t.Fatalf("ScanPrefix length %d; Scan %v", n, whole)
		}
		exact := *lim
		exact.MaxElements = objs
		if err := Scan(b[:n], &exact); err != nil {
			t.Fatalf("%d objects, but Scan refuses under MaxElements %d: %v", objs, objs, err)
		}
		if objs > 1 {
			exact.MaxElements = objs - 1
			if err := Scan(b[:n], &exact); err == nil {
				t.Fatalf("%d objects, but Scan accepts under MaxElements %d", objs, objs-1)
			}
		}
	})
}

func TestScanPrefix(t *testing.T) {
	for _, c := range []struct {
		in      []byte
		n, objs int
	}{
		{[]byte{0x01}, 1, 1},
		{[]byte{0x01, 0x02}, 1, 1},
		{[]byte{0x92, 0x01, 0x90, 0xc0}, 3, 3},
		{[]byte{0x81, 0xa1, 'k', 0x91, 0xc0, 0xff}, 5, 4},
	} {
		n, objs, err := ScanPrefix(c.in, nil)
		if err != nil || n != c.n || objs != c.objs {
			t.Errorf("% x: (%d, %d, %v), want (%d, %d, nil)", c.in, n, objs, err, c.n, c.objs)
		}
	}
	if _, _, err := ScanPrefix([]byte{0x92, 0x01}, nil); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("truncated array: %v", err)
	}
	if _, _, err := ScanPrefix(nil, nil); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("empty: %v", err)
	}
	if n, _, err := ScanPrefix([]byte{0x91, 0x91, 0xc0}, &decodeguard.Limits{MaxDepth: 1}); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize || n != 1 {
		t.Errorf("depth: (%d, %v)", n, err)
	}
	if _, _, err := ScanPrefix([]byte{0xd4, 0x01, 0x00}, nil); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("ext: %v", err)
	}
}
