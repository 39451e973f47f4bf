package ratelog

import "testing"

func BenchmarkRender(b *testing.B) {
	frame := make([]byte, 4096)
	b.Run("Render", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Render(frame)
		}
	})
	b.Run("AppendRender", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]byte, 0, maxRendered)
		for b.Loop() {
			dst = AppendRender(dst[:0], frame)
		}
	})
}
