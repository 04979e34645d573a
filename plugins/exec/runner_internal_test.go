package exec

import (
	"bytes"
	"testing"
)

// TestE2_LimitBuffer: the limit writer keeps the first max bytes, never
// holds more capacity than max, and never fails a write (so the command's
// pipe keeps draining).
func TestE2_LimitBuffer(t *testing.T) {
	b := &limitBuffer{max: 10 * 1024}
	var want []byte
	for i := 0; i < 50; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 333)
		want = append(want, chunk...)
		if n, err := b.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write %d: (%d, %v)", i, n, err)
		}
		if cap(b.buf) > b.max {
			t.Fatalf("capacity %d > max %d", cap(b.buf), b.max)
		}
	}
	if !bytes.Equal(b.buf, want[:b.max]) {
		t.Fatalf("kept %d bytes, not the first %d written", len(b.buf), b.max)
	}
}
