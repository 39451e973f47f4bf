package kvindex_test

import (
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
)

func toks(n int, mul int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)*mul + 1
	}
	return out
}

// TestBlockKeysStable pins the local keys of fixed inputs: keys are shared
// across processes and releases (router replicas on one Redis), so a
// change of the hash is a breaking change and must show here.
func TestBlockKeysStable(t *testing.T) {
	got := kvindex.BlockKeys(kvindex.KeyParams{Model: "m", BlockSize: 4}, toks(9, 31), nil)
	want := []kvindex.Key{0xef29449af551cb75, 0x4981911ae56bd71b}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("keys %#x, want %#x", got, want)
	}
}

// TestBlockKeysChain: keys chain (a child's key depends on its whole
// prefix), a parent key continues a chain exactly, and every input that
// names a prefix changes the key.
func TestBlockKeysChain(t *testing.T) {
	tk := toks(64, 7919)
	p := kvindex.KeyParams{BlockSize: 16}
	all := kvindex.BlockKeys(p, tk, nil)
	if len(all) != 4 {
		t.Fatalf("%d keys", len(all))
	}
	q := p
	q.Parent, q.HasParent = all[1], true
	tail := kvindex.BlockKeys(q, tk[32:], nil)
	if tail[0] != all[2] || tail[1] != all[3] {
		t.Fatal("a chain resumed from its parent's key differs")
	}
	seen := map[kvindex.Key]string{}
	add := func(name string, k kvindex.Key) {
		if o, ok := seen[k]; ok {
			t.Fatalf("%s and %s share key %#x", name, o, k)
		}
		seen[k] = name
	}
	for i, k := range all {
		add("block"+string(rune('0'+i)), k)
	}
	// The same tokens as a first block (no parent) differ from block 2.
	add("block2-as-first", kvindex.BlockKeys(p, tk[32:48], nil)[0])
	v := p
	v.Model = "other"
	add("model", kvindex.BlockKeys(v, tk[:16], nil)[0])
	v = p
	v.LoraName = "lora"
	add("lora", kvindex.BlockKeys(v, tk[:16], nil)[0])
	v = p
	v.ExtraKeys = [][]byte{{0x91, 0xa1, 'x'}}
	add("extra", kvindex.BlockKeys(v, tk[:16], nil)[0])
	v = p
	v.Seed = 99
	add("seed", kvindex.BlockKeys(v, tk[:16], nil)[0])
	v = p
	v.BlockSize = 8
	add("blocksize", kvindex.BlockKeys(v, tk[:16], nil)[1])
	// One token changed anywhere in the block.
	for i := 0; i < 16; i++ {
		c := append([]int64(nil), tk[:16]...)
		c[i] ^= 1 << 40
		add("token", kvindex.BlockKeys(p, c, nil)[0])
		delete(seen, kvindex.BlockKeys(p, c, nil)[0])
	}
	// Swapping two tokens changes the key.
	c := append([]int64(nil), tk[:16]...)
	c[0], c[1] = c[1], c[0]
	add("swap", kvindex.BlockKeys(p, c, nil)[0])
	// nil extra keys and msgpack nil are the same as none.
	v = p
	v.ExtraKeys = [][]byte{nil, {0xc0}}
	if k := kvindex.BlockKeys(v, tk[:32], nil); k[0] != all[0] || k[1] != all[1] {
		t.Fatal("nil extra keys change the key")
	}
	if k := kvindex.BlockKeys(kvindex.KeyParams{}, tk, nil); len(k) != 0 {
		t.Fatal("block size 0 gave keys")
	}
}

// TestBlockKeysSpread: keys of many similar blocks spread over all 64
// bits (no bit stuck).
func TestBlockKeysSpread(t *testing.T) {
	var or, and kvindex.Key = 0, ^kvindex.Key(0)
	seen := map[kvindex.Key]bool{}
	for i := 0; i < 20000; i++ {
		k := kvindex.BlockKeys(kvindex.KeyParams{BlockSize: 16}, []int64{int64(i), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil)[0]
		if seen[k] {
			t.Fatalf("collision at %d", i)
		}
		seen[k] = true
		or |= k
		and &= k
	}
	if or != ^kvindex.Key(0) || and != 0 {
		t.Fatalf("stuck bits: or %#x and %#x", or, and)
	}
}
