package output

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Printable makes text from the agent safe to show, on a terminal (`probed
// status`, `probed check`) as on the status page: every character that is
// not printable (strconv.IsPrint: C0 controls such as ESC, BEL, CR, LF and
// TAB, DEL, C1 controls U+0080–U+009F, format characters such as the bidi
// overrides) is escaped as strconv.Quote escapes it, without the quotes
// ("\x1b", "\r", "\a", "\u009b"); invalid UTF-8 shows as U+FFFD. Probe
// output, pod names and manifest errors can carry terminal escape sequences
// that would otherwise move the cursor, rewrite the screen or set the
// window title, and bidi overrides that reorder what a reader sees. Text
// without such a character is returned as it is.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if !strconv.IsPrint(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strconv.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r) // '\x1b'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}
