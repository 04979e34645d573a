package share_test

import (
	"strings"
	"testing"

	"github.com/probed/probed/agent/kube/share"
)

// A tenant's text: counts and shares within their ranges are read, every
// other form is refused with the key named and the value quoted only when
// it is short.
func TestParseHostile(t *testing.T) {
	for _, tc := range []struct {
		in          string
		of10, of10d int // Of(10, true), Of(10, false)
	}{
		{"0", 0, 0}, {"3", 3, 3}, {"2147483647", 10, 10}, {"0%", 0, 0}, {"50%", 5, 5}, {"55%", 6, 5}, {"100%", 10, 10},
	} {
		v, err := share.Parse("probed.io/x", tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got := v.Of(10, true); got != tc.of10 {
			t.Errorf("%q of 10 rounded up = %d, want %d", tc.in, got, tc.of10)
		}
		if got := v.Of(10, false); got != tc.of10d {
			t.Errorf("%q of 10 rounded down = %d, want %d", tc.in, got, tc.of10d)
		}
		if v.String() != tc.in {
			t.Errorf("%q printed %q", tc.in, v.String())
		}
	}
	for _, in := range []string{"", "-1", "-5%", "101%", "1e3", "50 %", " 5", "+5", "05", "2147483648", "5%%", "%", "0x10", "½", strings.Repeat("9", 1<<20)} {
		_, err := share.Parse("probed.io/x", in)
		if err == nil {
			t.Errorf("%q accepted", in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "probed.io/x") || len(msg) > 200 {
			t.Errorf("%q: error %q (%d bytes) does not name the key or is not bounded", in[:min(len(in), 20)], msg[:min(len(msg), 300)], len(msg))
		}
	}
}
