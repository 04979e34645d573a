// Package suggest finds the known name closest to a misspelled one, for
// "did you mean" hints in validation errors.
package suggest

import "strings"

// Closest returns the name key differs from only by case, or else by the
// fewest edits, at most one for keys of up to four characters and two for
// longer ones; "" when none is that close.
func Closest(key string, names []string) string {
	limit := 3
	if len(key) <= 4 {
		limit = 2
	}
	best, bestD := "", limit
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n
		}
		if d := editDistance(strings.ToLower(n), strings.ToLower(key), bestD); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, capped at max.
func editDistance(a, b string, max int) int {
	if d := len(a) - len(b); d >= max || -d >= max {
		return max
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], max)
}
