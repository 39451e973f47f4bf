package kvload

import "strconv"

// ScoreBody is a kv-index POST /score body of about n bytes: a token list
// of 7-digit ids, the big body of issue 37's flood
// (reliability/fairshare37) and of BenchmarkScoreBodyDecode.
func ScoreBody(n int) []byte {
	b := []byte(`{"tokens":[`)
	for i := 0; len(b) < n-16; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(1000000+i%1000000), 10)
	}
	return append(b, "]}"...)
}
